"""When waiting requests join a running batch: at the first free slot, or a few slots later.

A join costs the step it lands in a price that does not grow with the number of joiners: the
prefill forward, the MTP head's run over the joiners' prompt pairs and the caches' appends are
each one graph, whatever rows they carry. Rows of a speculative batch leave a round or two
apart (each row accepts its own drafts), so joining at every free slot pays that price once per
leaving row: on the H200, P5's trained hybrid at B = 16 (fixed depth 3, 64 prompts) took 35 join
steps of 8.5 ms against 4.2 ms without, 34% of the job's time (bench/results/s56).

With more requests waiting than slots are free, the queue keeps the batch full either way, so
the gate holds joins back until `min_free_share` of the batch is free (or for at most
`max_wait_steps` steps): fewer, larger joins, against a few rounds with idle slots. With no more
waiting than free slots (the job's tail, light traffic) it opens at once, as it does for an
empty batch: nothing would join later that could join now. A batch of up to 1 / min_free_share
slots joins at its first free slot, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class JoinGate:
    min_free_share: float = 0.25  # of max_batch_size; 0: join at every free slot
    max_wait_steps: int = 8  # steps a join may be held back (bounds a request's extra queueing)
    held_steps: int = 0  # steps the gate has held joins back since it last opened

    def open(self, free: int, waiting: int, running: int, max_batch_size: int) -> bool:
        """Whether the waiting requests may start joining this step: `free` slots of
        `max_batch_size`, `waiting` requests queued, `running` rows decoding."""
        if free <= 0 or waiting <= 0:
            return False
        wanted = max(1, math.ceil(self.min_free_share * max_batch_size))
        due = free >= wanted or self.held_steps >= self.max_wait_steps
        if running == 0 or waiting <= free or due:
            self.held_steps = 0
            return True
        self.held_steps += 1
        return False
