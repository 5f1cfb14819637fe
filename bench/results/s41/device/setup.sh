# Sourced by every job here (`bash bench/results/s41/device/job_*.sh` from the repository root on
# the device): bench/device_setup.sh, this tree in /root/t41.
source bench/device_setup.sh t41
