#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu_prepare.sh here and with .device carried along:
#   bash scripts/gpu_run.sh OUT_DIR [STAGE ...]        (default: up 7b links)
# Stages (issue 11), run in the order given, each under a time limit; every result is packed
# into OUT_DIR/results.tar.xz (run.log beside it):
#   up         nvidia-smi, doctor, the gpu-labelled tests, pinned H2D/D2H, bench step, the
#              default job on strata.device=cuda with a trace
#   7b[=N]     configs/llama_7b_gpu.json: its estimate for this machine, then N steps (6) on
#              synthetic tokens with a trace
#   max[=N]    configs/llama_10b_gpu.json (the largest model --max finds for this machine: params in
#              host memory, states on NVMe with host_blocks auto): its estimate, then N steps (3)
#   links[=io] bench links (pinned copies vs raw cudaMemcpyAsync, NVMe vs fio) and, without "=io",
#              bench adam on every core (vs the memory ceiling, LibTorch's and DeepSpeed's CPU Adam)
#   cmp[=S]    Strata at the peers' size S (4.3b: DeepSpeed's CPU offload of 7b is killed in 128 GiB) and
#              batch (STRATA_PEER_MB x STRATA_PEER_ACC, 4 x 4), states off the GPU: micro-batch-major,
#              then layer-major
#   peers[=S]  at size S (4.3b) and the same batch: the in-memory reference (plain PyTorch, every
#              state on the GPU), FSDP2 CPU offload, DeepSpeed ZeRO-Infinity (STRATA_PEER_OFFLOADS:
#              cpu nvme)
# The binaries come from .device/bin when they run here (built by gpu_prepare.sh against the
# same LibTorch); otherwise they are built here (minutes of device time). STRATA_GPU_BUDGET_S
# (default 570) bounds the whole run: a stage gets what is left, and one that cannot start
# with a minute left is skipped and named in run.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_run.sh OUT_DIR [up] [7b[=STEPS]] [max[=STEPS]] [links] [peers[=SIZE]]}
shift
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(up 7b links)
# At most 8 files come back from the GPU machine: every result goes to OUT_DIR/all/, packed at the
# end (also on a time-out's TERM) into OUT_DIR/results.tar.xz beside a copy of run.log.
mkdir -p "$out/all"
top=$(cd "$out" && pwd)
out=$top/all  # absolute: the peers run from bench/peers
pack() {
  cp "$out/run.log" "$top/run.log" 2>/dev/null
  tar -C "$top" -cJf "$top/results.tar.xz" all && rm -rf "$out"
  rm -rf /tmp/peers-nvme  # DeepSpeed's swap files (stage peers)
}
trap pack EXIT
trap 'exit 143' TERM
root=$PWD
prefix=$root/.device/prefix
budget=${STRATA_GPU_BUDGET_S:-570}
log() { printf '[gpu_run %4ds] %s\n' "$SECONDS" "$*" | tee -a "$out/run.log" >&2; }
left() { echo $((budget - SECONDS)); }
# run LIMIT_S LOG CMD...: CMD under the smaller of LIMIT_S and the time left, output to OUT/LOG.
run() {
  local limit=$1 file=$2; shift 2
  local t; t=$(left)
  [ "$limit" -lt "$t" ] && t=$limit
  if [ "$t" -lt 20 ]; then log "skipped (no time left): $*"; return 1; fi
  timeout -k 10 "$t" "$@" > "$out/$file" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && log "timed out after ${t}s: $*"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && log "exit $rc: $* (see $file)"
  return $rc
}

# --- libraries and binaries -------------------------------------------------------------
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
mkdir -p "$prefix"
for f in .device/debs/*.deb; do dpkg -x "$f" "$prefix"; done
export PATH=$prefix/usr/bin:/usr/local/cuda/bin:$PATH
# fio runs through a wrapper that alone sees its carried libraries (gpu_prepare.sh).
mkdir -p "$prefix/fio" "$prefix/wrap"
[ -f .device/debs/fio-libs.tar.xz ] && tar -C "$prefix/fio" -xJf .device/debs/fio-libs.tar.xz
fio_libs=$prefix/fio/usr/lib/x86_64-linux-gnu:$prefix/fio/usr/lib/x86_64-linux-gnu/ceph:$prefix/fio/lib/x86_64-linux-gnu
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s:$LD_LIBRARY_PATH exec %s "$@"\n' "$fio_libs" "$prefix/usr/bin/fio" > "$prefix/wrap/fio"
chmod +x "$prefix/wrap/fio"
export PATH=$prefix/wrap:$PATH
fio --version > "$out/fio-version.txt" 2>&1 || echo "fio does not start: $(tail -1 "$out/fio-version.txt")" >&2
torch_version=$(python3 -c 'import torch; print(torch.__version__)')
# LibTorch's folder, then every pip-installed NVIDIA library folder (NCCL, cudart, ...), the
# CUDA toolkit's, and the Debian packages' (liburing, oneDNN, xxhash).
torch_libs=$(python3 -c 'import glob, os, torch
d = os.path.dirname(torch.__file__); sp = os.path.dirname(d)
print(":".join([d + "/lib"] + sorted(glob.glob(sp + "/nvidia/*/lib"))))')
export LD_LIBRARY_PATH=$torch_libs:/usr/local/cuda/lib64:$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
log "torch $torch_version; budget ${budget}s"

bins=(strata strata-cuda-bench cuda_tests engine_gpu_tests)
prebuilt_runs() {
  [ -f .device/bin/BUILT_FROM ] || { log "no prebuilt binaries"; return 1; }
  grep -qx "torch $torch_version" .device/bin/BUILT_FROM || { log "prebuilt for another torch: $(tail -1 .device/bin/BUILT_FROM)"; return 1; }
  local b missing=0
  for b in "${bins[@]}"; do
    ldd ".device/bin/$b" > "$out/ldd-$b.txt" 2>&1
    grep -q "not found" "$out/ldd-$b.txt" && { log "$b: $(grep 'not found' "$out/ldd-$b.txt" | tr -s ' \t' ' ' | head -3)"; missing=1; }
  done
  [ $missing = 0 ] && .device/bin/strata doctor > "$out/doctor.txt" 2>&1
}
mkdir -p build-gpu/tests
if prebuilt_runs; then
  cp .device/bin/strata .device/bin/strata-cuda-bench build-gpu/
  cp .device/bin/cuda_tests .device/bin/engine_gpu_tests build-gpu/tests/
  log "prebuilt binaries: $(head -1 .device/bin/BUILT_FROM)"
else
  log "building here"
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  export PKG_CONFIG_SYSROOT_DIR=$prefix PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
  [ -f build-gpu/build.ninja ] || cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
    -DSTRATA_PYTHON="$(command -v python3)" -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" \
    -DCMAKE_INCLUDE_PATH="$prefix/usr/include" -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" \
    > "$out/configure.log" 2>&1 || { log "configure failed (configure.log)"; exit 1; }
  run 420 build.log cmake --build build-gpu -j "$(nproc)" --target "${bins[@]}" || { log "build failed (build.log)"; exit 1; }
  log "built"
  build-gpu/strata doctor > "$out/doctor.txt" 2>&1
fi
S=build-gpu/strata

# --- stages -----------------------------------------------------------------------------
status=0
stage_up() {
  local t
  local -A limit=([cuda_tests]=60 [engine_gpu_tests]=150)
  for t in cuda_tests engine_gpu_tests; do
    run "${limit[$t]}" "test-$t.log" build-gpu/tests/$t || status=1
    log "$t: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$out/test-$t.log" | tr '\n' ' ')"
  done
  run 60 h2d.json build-gpu/strata-cuda-bench $((4 << 30)) $((64 << 20)) 7 || status=1
  run 60 bench-step.json $S bench step --json || status=1
  # The default job on the GPU (blocks on cuda:0, every state on NVMe): loss curve, memory line.
  run 90 train-tiny-gpu.log $S train --set strata.device=cuda --trace "$out/trace.json" || status=1
  tail -3 "$out/train-tiny-gpu.log" | tee -a "$out/run.log"
}
stage_7b() {  # a model the GPU cannot hold: weights on the GPU, states and gradient sums in host memory
  run 60 estimate-7b.txt $S estimate --config configs/llama_7b_gpu.json --device cuda
  tail -4 "$out/estimate-7b.txt" | tee -a "$out/run.log"
  # The step-time model's prediction from nominal figures, for the train log's steps to check.
  local machine
  machine=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 |
            awk '/H200/ {print "h200"; exit} /PCIe/ {print "h100-pcie"; exit} {print "h100-sxm"}')
  run 60 predict-7b.txt $S estimate --config configs/llama_7b_gpu.json --machine "${machine:-h100-sxm}"
  tail -7 "$out/predict-7b.txt" | tee -a "$out/run.log"
  run 480 train-7b.log $S train --predict --config configs/llama_7b_gpu.json --steps "${1:-6}" --set strata.data.path= \
    --set strata.eval_interval=0 --set scheduler.params.warmup_num_steps=0 --set wall_clock_breakdown=true \
    --trace "$out/trace-7b.json" || status=1
  tail -8 "$out/train-7b.log" | tee -a "$out/run.log"
}
stage_max() {  # the largest model: params in host memory, states on NVMe (host_blocks auto)
  run 60 estimate-10b.txt $S estimate --config configs/llama_10b_gpu.json --set strata.data.path= --device cuda
  tail -4 "$out/estimate-10b.txt" | tee -a "$out/run.log"
  run 540 train-10b.log $S train --config configs/llama_10b_gpu.json --steps "${1:-3}" --set strata.data.path= \
    --set strata.eval_interval=0 --set scheduler.params.warmup_num_steps=0 --trace "$out/trace-10b.json" || status=1
  tail -8 "$out/train-10b.log" | tee -a "$out/run.log"
}
install_deepspeed() {
  [ -d .device/wheels ] || { log "no .device/wheels: DeepSpeed not installed"; return 1; }
  # Only the wheels whose distribution the machine lacks: the others would shadow its own.
  local lacking
  lacking=$(python3 -c 'import glob, importlib.metadata as md, os
for w in sorted(glob.glob(".device/wheels/*.whl")):
    try: md.distribution(os.path.basename(w).split("-")[0])
    except md.PackageNotFoundError: print(w)')
  [ -n "$lacking" ] && python3 -m pip install -q --no-index --no-deps --target /tmp/ds-site $lacking >> "$out/run.log" 2>&1
  export PYTHONPATH=/tmp/ds-site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/ds-site/bin:$PATH
  # DeepSpeed's aio op (its NVMe offload) is built at first use against the carried libaio:
  # CFLAGS/LDFLAGS for its compatibility probe, CPATH/LIBRARY_PATH for the build itself.
  local inc=$prefix/usr/include libs=$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu
  export CFLAGS="-I$inc" LDFLAGS="-L${libs//:/ -L}" CPATH=$inc${CPATH:+:$CPATH} \
    LIBRARY_PATH=$libs${LIBRARY_PATH:+:$LIBRARY_PATH} LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$libs
  export TORCH_CUDA_ARCH_LIST=9.0  # DeepSpeed cannot parse the image's "9.0a"
}
stage_links() {
  run 150 links.json $S bench links --json --nvme-size 2G --copy-size 1G || status=1
  [ "${1:-}" = io ] && return
  install_deepspeed
  run 200 adam.json $S bench adam --json --threads "$(nproc)" --params 200000000 --rounds 5 --python python3 \
    --deepspeed-script bench/deepspeed_adam.py || status=1
}
# The batch every comparison runs (stages cmp and peers): micro-batch x accumulation x 2048 tokens.
mb=${STRATA_PEER_MB:-4} acc=${STRATA_PEER_ACC:-4} steps=${STRATA_PEER_STEPS:-4}
# The model shape of a peers' size (bench/peers/sizes.py) as strata.model overrides.
shape_sets() {
  python3 -c "import sys; sys.path.insert(0, 'bench/peers'); from sizes import SIZES
d, l, h, kv, f = SIZES['$1']
print(f'--set strata.model.d_model={d} --set strata.model.n_layer={l} --set strata.model.n_head={h} '
      f'--set strata.model.n_kv_head={kv} --set strata.model.ffn_hidden={f}')"
}
stage_cmp() {  # Strata on configs/llama_7b_gpu.json, at the peers' size and batch
  local size=${1:-4.3b} shape
  shape=$(shape_sets "$size") || { log "unknown size $size"; return 1; }
  # shellcheck disable=SC2206
  local batch=(--steps "$steps" --set train_micro_batch_size_per_gpu="$mb" --set gradient_accumulation_steps="$acc"
               --set strata.data.path= --set strata.eval_interval=0 --set scheduler.params.warmup_num_steps=0 $shape)
  run 150 cmp-offload.log $S train --predict --config configs/llama_7b_gpu.json "${batch[@]}" || status=1
  tail -3 "$out/cmp-offload.log" | tee -a "$out/run.log"
  # Layer-major: the next step's forward passes block 0 with every micro-batch before block 1
  # needs its update, so the update hides behind the whole forward, not the first micro-batch's.
  run 150 cmp-layer-major.log $S train --predict --config configs/llama_7b_gpu.json "${batch[@]}" \
    --trace "$out/trace-cmp-layer-major.json" \
    --set strata.schedule=layer_major || status=1
  tail -3 "$out/cmp-layer-major.log" | tee -a "$out/run.log"
}
stage_peers() {  # STRATA_PEER_OFFLOADS: DeepSpeed's offload targets (cpu nvme)
  install_deepspeed || return
  local size=${1:-4.3b} off
  local args=(--size "$size" --micro-batch "$mb" --accumulation "$acc" --steps "$steps")
  mkdir -p /tmp/peers-nvme
  local only=" ${STRATA_PEERS:-in-memory fsdp2 ds} "  # which of them run
  [[ $only == *" in-memory "* ]] && (cd bench/peers && run 150 "in-memory-$size.log" python3 torch_in_memory.py "${args[@]}")
  [[ $only == *" fsdp2 "* ]] && (cd bench/peers && run "${STRATA_FSDP2_LIMIT_S:-180}" "fsdp2-$size.log" torchrun --nproc_per_node 1 fsdp2_offload.py "${args[@]}")
  [[ $only == *" ds "* ]] && for off in ${STRATA_PEER_OFFLOADS:-cpu nvme}; do
    (cd bench/peers && run 240 "ds-$off-$size.log" deepspeed --num_gpus 1 ds_zero_infinity.py "${args[@]}" --offload $off)
  done
  cat "$out"/in-memory-*.log "$out"/fsdp2-*.log "$out"/ds-*.log 2>/dev/null | grep '^{' | tee "$out/peers.jsonl"
}
for s in "${stages[@]}"; do
  name=${s%%=*}; arg=""; [ "$name" != "$s" ] && arg=${s#*=}
  if [ "$(left)" -lt 60 ]; then log "stage $name skipped: $(left)s left"; status=1; continue; fi
  log "stage $name"
  case "$name" in
    up) stage_up ;;
    7b) stage_7b "$arg" ;;
    max) stage_max "$arg" ;;
    links) stage_links "$arg" ;;
    cmp) stage_cmp "$arg" ;;
    peers) stage_peers "$arg" ;;
    *) log "unknown stage '$s' (up, 7b[=STEPS], max[=STEPS], links[=io], cmp[=SIZE], peers[=SIZE])"; status=1 ;;
  esac
done
log "done, exit $status"
exit $status
