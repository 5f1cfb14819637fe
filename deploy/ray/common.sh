# Shared by start_head.sh and join_worker.sh (sourced, never run on its own).
#
# Environment knobs (all optional unless a script says otherwise):
#   SPECFLEET_HOME            checkout of specfleet on this Mac (default: two levels above this file)
#   SPECFLEET_RAY             ray executable (default: $SPECFLEET_HOME/.venv/bin/ray); every node
#                             must run the same Ray and Python versions
#   SPECFLEET_NODE_IP         IP address other nodes reach this one on (default: detected)
#   SPECFLEET_NUM_CPUS        CPUs Ray may schedule on this node (default: all logical CPUs)
#   SPECFLEET_OBJECT_STORE_BYTES  Ray object store size (default 1 GiB: tokens travel over gRPC,
#                             not through Ray objects, so the unified memory stays with the model)
#   SPECFLEET_RAY_AUTH        "token" (default) or "disabled". Ray's GCS, raylets and dashboard run
#                             arbitrary code for anyone who can reach them, so every node, and every
#                             driver (specfleet up), presents the same token
#   SPECFLEET_RAY_AUTH_TOKEN_FILE  that token (default ~/.ray/auth_token; the head creates it)
# shellcheck shell=bash

SPECFLEET_HOME="${SPECFLEET_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
RAY_BIN="${SPECFLEET_RAY:-$SPECFLEET_HOME/.venv/bin/ray}"

# Ray refuses multi-node clusters on macOS unless this is set, and without it
# ray.util.get_node_ip_address() answers 127.0.0.1, so a worker would advertise loopback.
# The raylet passes it on to every Ray worker process it starts on this node.
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1

# MLX/Metal state is not fork-safe. Ray starts each worker process by exec'ing a fresh
# interpreter (never by forking one that touched Metal), and Python's multiprocessing already
# defaults to spawn on macOS; keep it that way. Do not paper over "objc ... fork()" crashes with
# OBJC_DISABLE_INITIALIZE_FORK_SAFETY: find the fork and make it a spawn.

die() {
  echo "$(basename "$0"): error: $*" >&2
  exit 2
}

is_ipv4() {
  local re='^([0-9]{1,3}\.){3}[0-9]{1,3}$'
  [[ $1 =~ $re ]]
}

# This node's source address for traffic to host $1: the address peers on that network reach us on.
ip_towards() {
  local iface
  case "$(uname -s)" in
    Darwin)
      iface=$(route -n get "$1" 2>/dev/null | awk '/interface:/ {print $2}')
      [ -n "$iface" ] && ipconfig getifaddr "$iface" 2>/dev/null
      ;;
    *)
      if command -v ip >/dev/null; then
        ip -4 route get "$1" 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p'
      else
        primary_ip
      fi
      ;;
  esac
}

# The primary LAN address when there is no peer to route towards (the head).
primary_ip() {
  case "$(uname -s)" in
    Darwin) ipconfig getifaddr en0 2>/dev/null || ipconfig getifaddr en1 2>/dev/null ;;
    *) hostname -I 2>/dev/null | awk '{print $1}' ;;
  esac
}

cpu_count() {
  case "$(uname -s)" in
    Darwin) sysctl -n hw.logicalcpu ;;
    *) nproc ;;
  esac
}

check_common() {
  [ -x "$RAY_BIN" ] ||
    die "ray not found at $RAY_BIN; install specfleet into $SPECFLEET_HOME/.venv (pip install -e .) or set SPECFLEET_RAY"
  is_ipv4 "$NODE_IP" ||
    die "node IP '$NODE_IP' is not an IPv4 address; set SPECFLEET_NODE_IP to this Mac's LAN address"
  NUM_CPUS="${SPECFLEET_NUM_CPUS:-$(cpu_count)}"
  [[ $NUM_CPUS =~ ^[0-9]+$ ]] || die "SPECFLEET_NUM_CPUS=$NUM_CPUS must be a whole number"
  OBJECT_STORE_BYTES="${SPECFLEET_OBJECT_STORE_BYTES:-1073741824}"
  [[ $OBJECT_STORE_BYTES =~ ^[0-9]+$ ]] ||
    die "SPECFLEET_OBJECT_STORE_BYTES=$OBJECT_STORE_BYTES must be a byte count, e.g. 1073741824"
}

# Make the auth mode explicit on every node: left alone, Ray turns token auth on for a head that
# finds ~/.ray/auth_token but not for a joining worker, which then fails with InvalidAuthToken.
# $1 = "head" (may create the default token) or "worker" (must be given the head's token).
setup_auth() {
  local mode="${SPECFLEET_RAY_AUTH:-token}"
  case "$mode" in
    disabled)
      export RAY_AUTH_MODE=disabled
      return
      ;;
    token) ;;
    *) die "SPECFLEET_RAY_AUTH=$mode must be 'token' or 'disabled'" ;;
  esac
  local default_file="$HOME/.ray/auth_token"
  local file="${SPECFLEET_RAY_AUTH_TOKEN_FILE:-$default_file}"
  if [ ! -s "$file" ]; then
    if [ "$1" = head ] && [ "$file" = "$default_file" ]; then
      "$RAY_BIN" get-auth-token --generate >/dev/null
      chmod 600 "$file"
    else
      die "Ray auth token $file is missing; copy the head's ~/.ray/auth_token here (chmod 600) or set SPECFLEET_RAY_AUTH_TOKEN_FILE"
    fi
  fi
  export RAY_AUTH_MODE=token
  export RAY_AUTH_TOKEN_PATH="$file"
}
