# Sourced by every job here (`bash .gpu3/job_*.sh` from the repository root on the device, after
# .gpu1/stage.sh and .gpu2/finish.sh set up MLX's CUDA build): bench/device_setup.sh with this
# tree in /root/t35 (a carried tree of the commit before a change moved to /root/before, the
# trained hybrid unpacked at $T, the card's name printed); this stop's copy also drops
# .gpu3/old, which it carried.
source bench/device_setup.sh t35
rm -rf .gpu3/old
