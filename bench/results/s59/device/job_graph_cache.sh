#!/usr/bin/env bash
# s59: the policy variants with MLX's CUDA graph cache at SIZE entries (MLX_CUDA_GRAPH_CACHE_SIZE,
# read once per process; MLX's default: 400, least recently used evicted). Several engines in one
# process, each with a graph per (batch size, depth) and graphs of <= 20 kernels a forward, may
# evict each other's graphs: a timed pass then rebuilds.
# Usage: bash job_graph_cache.sh SIZE B PROMPTS DEPTH PAIRS TAG VARIANTS [SECONDS]
export MLX_CUDA_GRAPH_CACHE_SIZE=$1; shift
bash bench/results/s59/device/job_policy.sh "$@"
