# s57: source me on a device run: MLX's CUDA staging (its second half, once a machine), then the
# trained hybrid at /root/q35t, assembled once a machine from the parts an earlier run staged at
# /root/q35parts (.gpu4a/) and the rest in .gpu4b/ (the carry's 64 MiB holds the tree and half
# the checkpoint per run).
[ -f /root/mlxgpu/env.sh ] || source .gpu2/finish.sh
source /root/mlxgpu/env.sh
if [ ! -f /root/q35t/model.safetensors ]; then
  mkdir -p /root/q35t && cp .gpu4b/*.json .gpu4b/mtp.safetensors /root/q35t/
  cat /root/q35parts/model.part.aa /root/q35parts/model.part.ab .gpu4b/model.part.ac > /root/q35t/model.safetensors
fi
export PYTHONUNBUFFERED=1
