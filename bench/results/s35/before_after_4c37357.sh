#!/usr/bin/env bash
# before (4c37357, the base of stops 34-35's reviewed diff) / after (this checkout) on the CPU,
# through bench/before_after_cpu.sh (the trees in turns, each its own kernel cache)
cd "$(dirname "$0")/../../.." || exit 1
[ -d /tmp/wt_4c37357 ] || git worktree add -q /tmp/wt_4c37357 4c373570a2ff74238da733d60cde3375f5dcb3ff
exec bench/before_after_cpu.sh /tmp/wt_4c37357 "$PWD" /tmp/s35/ba4c
