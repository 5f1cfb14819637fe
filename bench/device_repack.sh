#!/usr/bin/env bash
# Re-split ../shared/tools/mlx-cuda-pack's carry folders into four, each small enough to travel
# beside this tree under the device tool's 64 MiB a call (the tracked tree is ~36 MB; the pack's
# two 30 MB parts no longer fit beside it, stop 64). Run from the repository root after
# mlx-cuda-pack (or on folders an earlier run of this made). Then, back to back:
#   bash .gpu1/stage.sh   (carry .gpu1)     bash .gpu1b/stage.sh  (carry .gpu1b)
#   bash .gpu1c/stage.sh  (carry .gpu1c)    source .gpu2/finish.sh && ...  (carry .gpu2, ...)
# Each stage.sh copies its folder to /root/mlxgpu; finish.sh joins libmlx.xz.part.a? there.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shopt -s nullglob
parts=(.gpu1/libmlx.xz.part.* .gpu1b/libmlx.xz.part.* .gpu1c/libmlx.xz.part.* .gpu2/libmlx.xz.part.*)
# the parts in the order of their own names (aa, ab, ...), whichever folder holds them
cat $(printf '%s\n' "${parts[@]}" | awk -F/ '{print $NF, $0}' | sort | cut -d' ' -f2) \
  > "$work/libmlx.so.xz"
xz -t "$work/libmlx.so.xz"  # the parts join into one whole archive, or stop here
sites=(.gpu1/site.tar.x[z] .gpu1b/site.tar.x[z])  # globs: nullglob drops the missing one
cp "${sites[0]}" "$work/"
cp .gpu1/stage.sh .gpu2/finish.sh "$work/"
size=$(( ($(stat -c %s "$work/libmlx.so.xz") + 3) / 4 ))
(cd "$work" && split -b "$size" libmlx.so.xz libmlx.xz.part.)
rm -rf .gpu1 .gpu1b .gpu1c .gpu2
mkdir -p .gpu1 .gpu1b .gpu1c .gpu2
mv "$work/libmlx.xz.part.aa" .gpu1/
mv "$work/libmlx.xz.part.ab" "$work/site.tar.xz" .gpu1b/
mv "$work/libmlx.xz.part.ac" .gpu1c/
mv "$work/libmlx.xz.part.ad" "$work/finish.sh" .gpu2/
for d in .gpu1 .gpu1b .gpu1c; do cp "$work/stage.sh" "$d/"; done
for d in /.gpu1/ /.gpu1b/ /.gpu1c/ /.gpu2/; do
  grep -qxF "$d" .git/info/exclude || echo "$d" >> .git/info/exclude
done
du -sh .gpu1 .gpu1b .gpu1c .gpu2
