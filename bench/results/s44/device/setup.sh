# Sourced by every job here (`bash bench/results/s44/device/job_*.sh` from the repository root on
# the device): bench/device_setup.sh, this tree in /root/t44.
source bench/device_setup.sh t44
