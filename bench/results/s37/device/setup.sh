# Sourced by every job here (from the repository root on the device): bench/device_setup.sh,
# this tree in /root/t37.
source bench/device_setup.sh t37
