#!/usr/bin/env bash
# s57: P5 on the hybrid job_train.sh left at /root/q35t, as stop 56's job_p5.sh (adaptive depth up
# to 4, warm-up on, served traffic 96 tokens +- 50%), with a longer limit for an A/B and its
# pairs in one process.
# Usage: bash job_p5.sh B PROMPTS TAG [extra p5_pairs args, e.g. --ab-row-limits 32:inf,64:48]
LIMIT_S=560 exec bash bench/results/s56/device/job_p5.sh "$@"
