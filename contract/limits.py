"""Limits on every size that arrives from outside, shared by the gateway, the scheduler, the
worker and the client, so that what one side accepts the next side accepts too.

A request that passes the gateway's checks must never be refused by a worker for a size the
gateway let through (issue 13, defect 1: a 256-character id grew past the worker's id limit on
its way there and the worker ended the session of every request on it).
"""

from __future__ import annotations

# A caller's request id (gateway, Client, batch jobs): characters.
MAX_REQUEST_ID_CHARS = 256
# The scheduler sends each attempt as "<request id>~<attempt>.<dispatch>" (cluster/scheduler.py);
# attempt and dispatch are counters below 2**64, at most 20 digits each.
WIRE_ID_SUFFIX_CHARS = 1 + 20 + 1 + 20
# The worker's limit on a wire id: every id the gateway admits fits, with its suffix.
MAX_WIRE_ID_CHARS = MAX_REQUEST_ID_CHARS + WIRE_ID_SUFFIX_CHARS

# Stop conditions (SamplingParams.stop / stop_token_ids). Bounded so that tokenizing a request's
# stop strings costs milliseconds, not seconds (issue 13, defect 5: 64 stops of 240 KB each
# stalled a worker for 6.7 s).
MAX_STOP_SEQUENCES = 64
MAX_STOP_CHARS = 1024  # per stop string
# Per token-id stop: what a MAX_STOP_CHARS string may encode to (a byte-level tokenizer emits at
# most one token per UTF-8 byte, 4 per character; +1 for a leading-space marker), so a stop string
# the gateway admits is never refused after the worker tokenizes it.
MAX_STOP_TOKENS = 4 * MAX_STOP_CHARS + 1
MAX_STOP_TOKEN_IDS = 1024  # entries of stop_token_ids

# Token ids are uint32 on every wire.
MAX_TOKEN_ID = 2**32 - 1
