# Sourced by every job here (`bash bench/results/s46/device/job_*.sh` from the repository root on
# the device): bench/device_setup.sh, this tree in /root/t46.
source bench/device_setup.sh t46
