#!/usr/bin/env bash
# Join this Mac to a specfleet fleet as a worker node: it advertises the custom resource
# {"specfleet_worker": 1}, so the launcher places exactly one MLX worker actor on it.
#
#   SPECFLEET_HEAD_ADDRESS=192.168.1.10:6379 deploy/ray/join_worker.sh [extra `ray start` args]
#
# Pass --block to stay in the foreground (launchd, see com.specfleet.worker.plist).
# SPECFLEET_NODE_IP defaults to the address of the interface that routes to the head.
# Other knobs: see common.sh.
set -euo pipefail
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

HEAD="${SPECFLEET_HEAD_ADDRESS:-}"
[[ $HEAD =~ ^[^:]+:[0-9]+$ ]] ||
  die "SPECFLEET_HEAD_ADDRESS='$HEAD' must be HEAD_IP:PORT, e.g. 192.168.1.10:6379 (printed by start_head.sh)"
HEAD_HOST="${HEAD%:*}"
NODE_IP="${SPECFLEET_NODE_IP:-$(ip_towards "$HEAD_HOST" || true)}"
[ -n "$NODE_IP" ] || die "no route from this Mac to head $HEAD_HOST; check the network or set SPECFLEET_NODE_IP"
check_common
setup_auth worker

echo "specfleet: worker $NODE_IP joining $HEAD ($("$RAY_BIN" --version))"
exec "$RAY_BIN" start \
  --address="$HEAD" \
  --node-ip-address="$NODE_IP" \
  --num-cpus="$NUM_CPUS" \
  --num-gpus=0 \
  --object-store-memory="$OBJECT_STORE_BYTES" \
  --resources='{"specfleet_worker": 1}' \
  --disable-usage-stats \
  "$@"
