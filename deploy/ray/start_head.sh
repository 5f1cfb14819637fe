#!/usr/bin/env bash
# Start the Ray head of a specfleet fleet (the Mac that runs the scheduler and gateway).
#
#   SPECFLEET_NODE_IP=192.168.1.10 deploy/ray/start_head.sh [extra `ray start` args, e.g. --block]
#
#   SPECFLEET_RAY_PORT    GCS port workers join on (default 6379)
#   SPECFLEET_HEAD_WORKER set to 1 to also place a worker on the head (adds the worker resource)
# plus the knobs listed in common.sh (Ray token auth is on by default). Workers then run
# join_worker.sh with SPECFLEET_HEAD_ADDRESS=<this IP>:<port> and a copy of the head's token.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NODE_IP="${SPECFLEET_NODE_IP:-$(primary_ip || true)}"
[ -n "$NODE_IP" ] || die "could not detect this Mac's LAN address; set SPECFLEET_NODE_IP"
PORT="${SPECFLEET_RAY_PORT:-6379}"
[[ $PORT =~ ^[0-9]+$ ]] || die "SPECFLEET_RAY_PORT=$PORT must be a port number"
check_common
setup_auth head

args=(
  start --head
  --node-ip-address="$NODE_IP"
  --port="$PORT"
  --num-cpus="$NUM_CPUS"
  --num-gpus=0 # Ray cannot see Metal; MLX uses it without a Ray GPU resource
  --object-store-memory="$OBJECT_STORE_BYTES"
  --disable-usage-stats
)
if [ "${SPECFLEET_HEAD_WORKER:-0}" = 1 ]; then
  args+=(--resources='{"specfleet_worker": 1}')
fi

echo "specfleet: Ray head on $NODE_IP:$PORT ($("$RAY_BIN" --version))"
exec "$RAY_BIN" "${args[@]}" "$@"
