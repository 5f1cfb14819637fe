#!/usr/bin/env bash
# before (fa9559a, the base of stops 35-36's reviewed diff) / after (5d2bf3b) on the CPU, through
# bench/before_after_cpu.sh (the trees in turns, each its own kernel cache)
cd "$(dirname "$0")/../../.." || exit 1
[ -d /tmp/wt_fa9559a ] || git worktree add -q /tmp/wt_fa9559a fa9559a4b61b43f3834e6e9d9aa80fc2b8cb9bab
[ -d /tmp/wt_after36 ] || git worktree add -q /tmp/wt_after36 5d2bf3b
exec bench/before_after_cpu.sh /tmp/wt_fa9559a /tmp/wt_after36 /tmp/s36/bafa
