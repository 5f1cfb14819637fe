#!/usr/bin/env bash
# Stop 53, device job B: Nsight Systems timelines of a 6.6B B=1 job, plain and forced.
set -u
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: $NSYS"
export PYTHONPATH=.:$PYTHONPATH
for mode in plain forced; do
  flag=$([ $mode = forced ] && echo --forced || true)
  "$NSYS" profile --capture-range=cudaProfilerApi --trace=cuda -o $OUT/tl_$mode python3 \
    bench/results/s53/device/round_timeline_gpu.py --preset 6b $flag 2>&1 | grep -v "^Collecting\|^Generating"
  "$NSYS" stats --report cuda_gpu_trace --format csv -o $OUT/tl_$mode $OUT/tl_$mode.nsys-rep >/dev/null 2>&1
  "$NSYS" stats --report cuda_api_sum,cuda_gpu_kern_sum --format csv $OUT/tl_$mode.nsys-rep 2>/dev/null | head -60
  gzip -f $OUT/tl_${mode}*.csv; rm -f $OUT/tl_$mode.sqlite
done
ls -la $OUT
