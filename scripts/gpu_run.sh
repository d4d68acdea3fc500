#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_prepare.sh here and with .device carried along:
#   bash scripts/gpu_run.sh OUT_DIR [--peers SIZE | --stage3 STEPS]
# unpacks the Debian packages into a private prefix, installs the wheels, configures a
# CUDA build against the machine's own LibTorch (torch.utils.cmake_prefix_path), builds,
# runs the gpu-labelled tests and the GPU benchmarks, and writes every result to OUT_DIR.
# --stage3 STEPS: then the 7 B model of configs/llama_7b_gpu.json (issue 11, stage 3) for
# STEPS steps on synthetic tokens, with its estimate for this machine and a trace.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_run.sh OUT_DIR [--peers SIZE]}
peers_size=""
stage3_steps=""
[ "${2:-}" = "--peers" ] && peers_size=${3:-7b}
[ "${2:-}" = "--stage3" ] && stage3_steps=${3:-6}
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

# A model the GPU cannot hold: weights resident, optimizer states and gradient sums in host
# memory; the estimate first (tiers, link and NVMe bytes per step), then the run.
if [ -n "$stage3_steps" ]; then
  build-gpu/strata estimate --config configs/llama_7b_gpu.json --device cuda > "$out/estimate-7b.txt" 2>&1
  tail -6 "$out/estimate-7b.txt" | tee -a "$out/run.log"
  build-gpu/strata train --config configs/llama_7b_gpu.json --steps "$stage3_steps" --set strata.data.path= \
    --set strata.eval_interval=0 --set scheduler.params.warmup_num_steps=0 --set wall_clock_breakdown=true \
    --trace "$out/trace-7b.json" > "$out/train-7b.log" 2>&1 || status=1
  tail -8 "$out/train-7b.log" | tee -a "$out/run.log"
fi

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
