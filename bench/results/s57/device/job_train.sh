#!/usr/bin/env bash
# s57: P5's trained hybrid at /root/q35t, as stop 56 trained it (its job_train.sh, the corpus as
# .gpu3/ beside .gpu2/), its peer_model.json copied as peer_trained_s57_h200.json.
STOP=s57 exec bash bench/results/s56/device/job_train.sh "$@"
