#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_prepare.sh here and with .device carried along:
#   bash scripts/gpu_run.sh OUT_DIR [--peers SIZE]
# unpacks the Debian packages into a private prefix, installs the wheels, configures a
# CUDA build against the machine's own LibTorch (torch.utils.cmake_prefix_path), builds,
# runs the gpu-labelled tests and the GPU benchmarks, and writes every result to OUT_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_run.sh OUT_DIR [--peers SIZE]}
peers_size=""
[ "${2:-}" = "--peers" ] && peers_size=${3:-7b}
mkdir -p "$out"
root=$PWD
prefix=$root/.device/prefix
log() { printf '[gpu_run] %s\n' "$*" | tee -a "$out/run.log" >&2; }

nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
mkdir -p "$prefix"
for f in .device/debs/*.deb; do dpkg -x "$f" "$prefix"; done
python3 -m venv --system-site-packages .device/venv
.device/venv/bin/pip install -q --no-index --find-links .device/wheels cmake ninja 2>&1 | tail -2
export PATH=$root/.device/venv/bin:/usr/local/cuda/bin:$PATH
export PKG_CONFIG_SYSROOT_DIR=$prefix PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
log "torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)') at $torch_prefix"

cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DSTRATA_PYTHON="$(command -v python3)" \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" > "$out/configure.log" 2>&1 || { log "configure failed"; exit 1; }
cmake --build build-gpu -j "$(nproc)" > "$out/build.log" 2>&1 || { log "build failed (see build.log)"; exit 1; }
log "built"

status=0
ctest --test-dir build-gpu -L gpu --output-on-failure > "$out/ctest-gpu.log" 2>&1 || status=1
tail -3 "$out/ctest-gpu.log" | tee -a "$out/run.log"
build-gpu/strata-cuda-bench $((4 << 30)) $((64 << 20)) 7 > "$out/h2d.json" 2>>"$out/run.log" || status=1
cat "$out/h2d.json" | tee -a "$out/run.log"
build-gpu/strata doctor > "$out/doctor.txt" 2>&1
build-gpu/strata bench step --json > "$out/bench-step.json" 2>>"$out/run.log" || status=1
# The default job on the GPU (blocks on cuda:0, every state on NVMe), its loss curve and memory line.
build-gpu/strata train --set strata.device=cuda --trace "$out/trace.json" > "$out/train-tiny-gpu.log" 2>&1 || status=1
tail -4 "$out/train-tiny-gpu.log" | tee -a "$out/run.log"

# The peers on the same LLaMA shape: DeepSpeed ZeRO-Infinity (cpu, nvme) and FSDP2 CPU offload.
if [ -n "$peers_size" ]; then
  .device/venv/bin/pip install -q --no-index --find-links .device/wheels deepspeed >> "$out/run.log" 2>&1
  mkdir -p /tmp/peers-nvme
  (cd bench/peers &&
   torchrun --nproc_per_node 1 fsdp2_offload.py --size "$peers_size" > "$out/fsdp2-$peers_size.log" 2>&1;
   for off in cpu nvme; do
     deepspeed --num_gpus 1 ds_zero_infinity.py --size "$peers_size" --offload $off > "$out/ds-$off-$peers_size.log" 2>&1
   done)
  grep -h '^{' "$out"/fsdp2-*.log "$out"/ds-*.log | tee "$out/peers.jsonl"
fi
exit $status
