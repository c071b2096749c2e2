#!/usr/bin/env bash
# The GPU checks of dpscale in under 8 minutes, build included, on a machine
# with NVIDIA GPUs whose image has nvcc, meson, ninja and PyTorch but no
# package registry. Builds build-gpu/ (NCCL from the toolkit or PyTorch's
# nvidia-nccl wheel, else without NCCL), then, most important first: dp and
# ddp --check in fp32 and bf16; dp with two replicas on GPU 0; a sweep with
# links measured; bf16 model TFLOP/s against the GEMMs alone; step time
# against PyTorch (scripts/torch_reference.py); what --no-trace and
# --no-nvml save; dpscale links against PyTorch's copies; compute-sanitizer
# memcheck on dp and ddp; an Nsight Compute capture filtered to the step
# ranges. Each result is a figure (name, value, goal, PASS/FAIL/SKIP/INFO)
# in OUTDIR/summary.txt, written even when a step fails or hangs or the
# build fails; past the deadline the remaining steps are recorded as
# 'skipped (deadline)'. Everything printed is in OUTDIR/device-check.log,
# the results folders in OUTDIR/results.tar.gz. Exit status 1 when a figure
# failed.
#   scripts/device-check.sh OUTDIR
#
# Steps and their time on one H200 (16 cores), cold: machine 5 s, build
# 45 s, info 3 s, --check x4 20 s, two replicas on GPU 0 x2 8 s, sweep 15 s,
# TFLOP/s 10 s, against PyTorch 30 s, --no-trace/--no-nvml x6 20 s, links
# 12 s, memcheck x2 60 s, ncu 50 s: about 280 s of the 480 s budget.
# Environment: DC_BUDGET (seconds, default 480) and the other settings of
# scripts/device-check-lib.sh; DC_BACKEND=host rehearses the steps on a
# machine without a GPU (dpscale's emulated devices: bf16, PyTorch and the
# GPU tools then fail or are skipped, so its figures mean nothing).
set -uo pipefail
if [ $# -ne 1 ]; then
  echo "usage: scripts/device-check.sh OUTDIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1" || { echo "device-check: cannot create $1" >&2; exit 2; }
out=$(cd "$1" && pwd)
# shellcheck source-path=SCRIPTDIR source=device-check-lib.sh
. "$root/scripts/device-check-lib.sh"
dc_init "$out"
dc_log "$out/device-check.log"
cd "$root" || exit 2
res="$out/results"
rm -rf "$res"
mkdir -p "$res"
bin="$root/build-gpu/src/dpscale"
py=python3
command -v python3 >/dev/null || py=/usr/bin/python3
summary=("$py" "$root/scripts/device_check_summary.py")
backend=${DC_BACKEND:-cuda}

# shellcheck disable=SC2317 # called from the EXIT trap
pack() {
  if [ -d "$res" ] && tar -czf "$out/results.tar.gz" -C "$out" results; then
    rm -rf "$res"
    echo "device-check: results folders packed into $out/results.tar.gz"
  fi
}
dc_at_exit pack

# The first of: PATH, then the given files (globs allowed); empty if none.
find_tool() {
  local name=$1 c
  shift
  command -v "$name" 2>/dev/null && return 0
  for c in "$@"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

# A run of dpscale into $res/NAME, then its figure FIG through the parser
# (KIND and its arguments after the folder).
dps_figure() {
  local fig=$1 rc=$2 kind=$3
  shift 3
  dc_was_skipped "$fig" "$rc" && return 0
  dc_figures_from "$fig" "${summary[@]}" "$kind" "$fig" "$@"
}

ngpu=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$ngpu" -ge 1 ] || ngpu=1
checks=()
for m in dp ddp; do for p in fp32 bf16; do checks+=("check $m $p gpus=$ngpu"); done; done
lgpus=$((ngpu > 1 ? 2 : 1))
links_paths=(h2d:host:dev0 d2h:dev0:host)
[ "$lgpus" -gt 1 ] && links_paths+=(d2d_write:dev0:dev1)
links_figs=()
for l in "${links_paths[@]}"; do
  IFS=: read -r lm ls ld <<<"$l"
  links_figs+=("links $lm $ls->$ld")
done
dc_plan build "dpscale info" "${checks[@]}" "check dp fp32 devices=0,0" "check dp bf16 devices=0,0" \
  "sweep dp,ddp gpus=1" "params same bits" "nvml pcie in sweep" "bf16 TFLOP/s vs GEMMs" "step time vs torch" "no-trace cost" \
  "no-nvml cost" "${links_figs[@]}" "memcheck dp" "memcheck ddp" "ncu step kernels" \
  "ncu step report"

# ~3 s
dc_step "machine" 0
gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
figure gpus "$ngpu x ${gpu:-unknown (nvidia-smi gave nothing)}" "-" INFO
figure nvcc "$(timeout 30 nvcc --version 2>&1 | tail -1)" "-" INFO
figure torch "$(timeout 60 "$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1 | tail -1)" "-" INFO
cuda_root=/usr/local/cuda
if [ ! -x "$cuda_root/bin/nvcc" ] && command -v nvcc >/dev/null; then
  cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
ncu=$(find_tool ncu "$cuda_root/bin/ncu" /opt/nvidia/nsight-compute/*/ncu "$cuda_root"/nsight-compute*/ncu)
sanitizer=$(find_tool compute-sanitizer "$cuda_root/bin/compute-sanitizer" \
  "$cuda_root/compute-sanitizer/compute-sanitizer")
figure tools "cuda ${cuda_root}; ncu ${ncu:-not found}; compute-sanitizer ${sanitizer:-not found}" "-" INFO

# Build, cold, 16 cores: meson setup ~10 s, ninja ~30 s.
if dc_step "build" 20 build; then
  meson=(meson)
  command -v meson >/dev/null || meson=("$py" -m mesonbuild.mesonmain)
  if ! command -v ninja >/dev/null; then
    nbin=$("$py" -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) && PATH="$nbin:$PATH"
  fi
  nccl_opt=(-Dnccl=disabled)
  nccl_from="none found"
  if [ -f "$cuda_root/include/nccl.h" ] && compgen -G "$cuda_root/lib64/libnccl.so*" >/dev/null; then
    nccl_opt=(-Dnccl=enabled)
    nccl_from="the toolkit"
  elif [ -f /usr/include/nccl.h ] && compgen -G "/usr/lib/*/libnccl.so*" >/dev/null; then
    nccl_opt=(-Dnccl=enabled)
    nccl_from="the system (/usr)"
  else
    # PyTorch's nvidia-nccl wheel: the folder holding include/nccl.h and lib/libnccl.so*
    wheel=$("$py" - <<'PY' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    for d, _, files in os.walk(base):
        lib = os.path.join(os.path.dirname(d), "lib")
        if "nccl.h" in files and os.path.isdir(lib) and any(
                f.startswith("libnccl.so") for f in os.listdir(lib)):
            print(os.path.dirname(d))
            raise SystemExit
PY
)
    if [ -n "$wheel" ]; then
      shim="$root/build-gpu-nccl"
      rm -rf "$shim"
      mkdir -p "$shim/lib"
      ln -sfn "$wheel/include" "$shim/include"
      sos=("$wheel"/lib/libnccl.so*)
      for so in "${sos[@]}"; do ln -sfn "$so" "$shim/lib/$(basename "$so")"; done
      [ -e "$shim/lib/libnccl.so" ] || ln -sfn "${sos[0]}" "$shim/lib/libnccl.so"
      nccl_opt=(-Dnccl=enabled "-Dnccl_path=$shim")
      nccl_from="PyTorch's wheel ($wheel)"
      export LD_LIBRARY_PATH="$wheel/lib:${LD_LIBRARY_PATH:-}"
    fi
  fi
  echo "NCCL: $nccl_from; meson options ${nccl_opt[*]}"
  rm -rf build-gpu
  setup=("${meson[@]}" setup build-gpu -Dcuda=enabled -Dcuda-arch=90 "-Dcuda-root=$cuda_root")
  if run -t 120 "${setup[@]}" "${nccl_opt[@]}"; then
    built="NCCL from $nccl_from"
    [ "${nccl_opt[0]}" = -Dnccl=disabled ] && built="without NCCL (none found)"
  elif [ "${nccl_opt[0]}" != -Dnccl=disabled ] && rm -rf build-gpu \
       && run -t 120 "${setup[@]}" -Dnccl=disabled; then
    built="without NCCL (setup with NCCL from $nccl_from failed)"
  else
    built=""
  fi
  if [ -z "$built" ]; then
    figure build "meson setup failed (see device-check.log)" "built" FAIL
  elif run -t 300 ninja -C build-gpu -j16; then
    figure build "ok, $built" "built" PASS
  else
    figure build "ninja failed (see device-check.log)" "built" FAIL
  fi
fi
if [ ! -x "$bin" ]; then
  echo "device-check: no $bin; the remaining steps need it"
  exit 1
fi

# ~3 s
if dc_step "info" 5 "dpscale info"; then
  run "$bin" info --backend "$backend"
  rc=$?
  if ! dc_was_skipped "dpscale info" "$rc"; then
    figure "dpscale info" "exit $rc" "exit 0 (the $backend backend opens)" \
      "$([ "$rc" -eq 0 ] && echo PASS || echo FAIL)"
  fi
fi

# 4 runs of ~4 s (ddp forks a rank and sets NCCL up): ~20 s
if dc_step "correctness on $ngpu GPU(s) (--check)" 20 "${checks[@]}"; then
  for m in dp ddp; do
    for p in fp32 bf16; do
      name="check-$m-$p"
      run "$bin" run --backend "$backend" --mode "$m" --gpus "$ngpu" --precision "$p" --model small \
        --steps 10 --check --out "$res" --name "$name"
      dps_figure "check $m $p gpus=$ngpu" $? check "$res/$name"
    done
  done
fi

# 2 runs of ~4 s
if dc_step "dp with two replicas on GPU 0" 8 "check dp fp32 devices=0,0"; then
  run "$bin" run --backend "$backend" --mode dp --devices 0,0 --model small --steps 10 --check \
    --out "$res" --name check-dp-fp32-00
  dps_figure "check dp fp32 devices=0,0" $? check "$res/check-dp-fp32-00"
fi
if dc_step "dp with two replicas on GPU 0, bf16" 8 "check dp bf16 devices=0,0"; then
  run "$bin" run --backend "$backend" --mode dp --devices 0,0 --precision bf16 --model small --steps 10 \
    --check --out "$res" --name check-dp-bf16-00
  dps_figure "check dp bf16 devices=0,0" $? check "$res/check-dp-bf16-00"
fi

# The links child (~3 s) and two configurations (~4 s each): ~15 s. Every
# configuration must end ok: the sweep's parent must not initialise CUDA
# before it forks them.
if dc_step "sweep with links measured" 15 "sweep dp,ddp gpus=1"; then
  run "$bin" sweep --backend "$backend" --mode dp,ddp --gpus 1 --model small --steps 5 --warmup 2 \
    --config-timeout 60 --out "$res" --name sweep
  dps_figure "sweep dp,ddp gpus=1" $? sweep "$res/sweep" 2
fi

# --- The CUDA backend's own figures (scripts/device_check_backend.py), apart from the steps
# around them. dp fp32 run twice with --save-params: the parameters equal bit for bit (the
# bias gradients' reduction has a fixed order; cuBLAS is deterministic on one GPU), ~8 s.
# NVML's PCIe bytes in the sweep's devices.csv: NVML initialised in each configuration's
# process, read from the cumulative counters, at least the host-to-device bytes counted.
if dc_step "backend: the same bits run to run, NVML in the sweep's processes" 10 \
    "params same bits" "nvml pcie in sweep"; then
  for k in 1 2; do
    run "$bin" run --backend "$backend" --mode dp --gpus 1 --model small --steps 5 --warmup 1 \
      --save-params "$res/bits-$k.params" --out "$res" --name "bits-$k"
  done
  dc_figures_from "params same bits" "$py" scripts/device_check_backend.py same-bits \
    "params same bits" "$res/bits-1.params" "$res/bits-2.params"
  dc_figures_from "nvml pcie in sweep" "$py" scripts/device_check_backend.py nvml-pcie \
    "nvml pcie in sweep" "$res/sweep" "$backend"
fi
# --- end of the CUDA backend's own figures

# ddp across two "nodes" on one machine: one rank each, its own GPU (CUDA_VISIBLE_DEVICES),
# told apart by NCCL as two hosts (NCCL_HOSTID: no P2P or shared memory between them, NCCL's
# network transport instead), meeting through rank 0's store as under mpirun: ~10 s.
two_nodes() {
  local port=$((29900 + RANDOM % 1000)) r pids=() rc=0 one
  for r in 0 1; do
    env OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 \
      OMPI_COMM_WORLD_LOCAL_SIZE=1 MASTER_ADDR=127.0.0.1 DPSCALE_PORT=$port \
      CUDA_VISIBLE_DEVICES=$r NCCL_HOSTID=dpscale-node$r \
      timeout 120 "$bin" run --backend "$backend" --mode ddp --comm nccl --model small --steps 10 \
      --check --timeout 60 --out "$res" --name nodes-nccl >"$res/nodes-nccl-rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    wait "${pids[$r]}"
    one=$?
    [ "$rc" -ne 0 ] || rc=$one
  done
  tail -n 3 "$res/nodes-nccl-rank0.log" "$res/nodes-nccl-rank1.log"
  return "$rc"
}
if dc_step "ddp across two emulated nodes over NCCL" 15 "check ddp 2 nodes nccl"; then
  if [ "$ngpu" -lt 2 ]; then
    figure "check ddp 2 nodes nccl" "skipped: 1 GPU here, and each emulated node needs its own" \
      "check pass" SKIP
  else
    two_nodes
    dps_figure "check ddp 2 nodes nccl" $? check "$res/nodes-nccl"
  fi
fi

# bert-large bf16, 13 steps of ~20 ms and the GEMMs alone: ~10 s per preset tried.
if dc_step "bf16 model TFLOP/s against the GEMMs alone" 12 "bf16 TFLOP/s vs GEMMs"; then
  rc=$DC_SKIP_RC
  for m in bert-large gpt2 resnet50; do
    name="tflops-$m"
    run "$bin" run --backend "$backend" --precision bf16 --model "$m" --steps 10 --warmup 3 --gemm-ref \
      --out "$res" --name "$name"
    rc=$?
    [ "$("${summary[@]}" field "$res/$name" status 2>/dev/null)" = oom ] || break
    echo "device-check: $m does not fit (oom); trying a smaller preset"
  done
  dps_figure "bf16 TFLOP/s vs GEMMs" "$rc" gemm "$res/$name" 0.80
fi

# resnet50 bf16 (batch 32): dpscale ~4 s; PyTorch ~25 s (numpy draws the
# parameters and each step's batch as dpscale's generator does).
if dc_step "step time against PyTorch" 35 "step time vs torch"; then
  run "$bin" run --backend "$backend" --mode dp --gpus 1 --precision bf16 --model resnet50 --steps 10 \
    --warmup 3 --out "$res" --name vs-torch-dpscale
  rc=$?
  if ! dc_was_skipped "step time vs torch" "$rc"; then
    run "$py" scripts/torch_reference.py --mode dp --gpus 1 --model resnet50 --precision bf16 \
      --steps 10 --warmup 3 --out "$res" --name vs-torch-torch --dpscale "$bin"
    dps_figure "step time vs torch" $? torch "$res/vs-torch-dpscale" "$res/vs-torch-torch" 0.85
  fi
fi

# 6 runs of ~3 s, interleaved (default, --no-trace, --no-nvml, twice) so
# that drift reaches all three alike.
if dc_step "what NVTX ranges and the NVML sampler cost" 20 "no-trace cost" "no-nvml cost"; then
  cost_args=(run --backend "$backend" --mode dp --gpus 1 --precision bf16 --model resnet50 --steps 50 --warmup 5
        --out "$res")
  rc=0
  for r in 1 2; do
    run "$bin" "${cost_args[@]}" --name "cost-default-$r" || rc=$?
    run "$bin" "${cost_args[@]}" --no-trace --name "cost-notrace-$r" || rc=$?
    run "$bin" "${cost_args[@]}" --no-nvml --name "cost-nonvml-$r" || rc=$?
  done
  if ! dc_was_skipped "no-trace cost" "$rc"; then
    dps_figure "no-trace cost" 0 cost 0.01 "$res/cost-default-1" "$res/cost-default-2" -- \
      "$res/cost-notrace-1" "$res/cost-notrace-2"
  fi
  if ! dc_was_skipped "no-nvml cost" "$rc"; then
    dps_figure "no-nvml cost" 0 cost 0.01 "$res/cost-default-1" "$res/cost-default-2" -- \
      "$res/cost-nonvml-1" "$res/cost-nonvml-2"
  fi
fi

# dpscale links ~3 s, PyTorch's copies ~8 s (its start included).
if dc_step "links against PyTorch's copies" 12 "${links_figs[@]}"; then
  run "$bin" links --backend "$backend" --gpus "$lgpus" --sizes 256M --steps 10 --out "$res" --name links
  rc=$?
  if [ "$rc" -ne "$DC_SKIP_RC" ]; then
    run "$py" scripts/torch_copies.py "$res/torch_copies.csv" --bytes $((256 << 20)) --samples 10
    rc=$?
  fi
  if [ "$rc" -eq "$DC_SKIP_RC" ]; then
    for f in "${links_figs[@]}"; do figure "$f" "skipped (deadline)" "-" SKIP; done
  else
    dc_figures_from links "${summary[@]}" links links "$res/links" "$res/torch_copies.csv" 0.05 \
      "${links_paths[@]}"
  fi
fi

# memcheck on tiny runs: ~30 s each (the tool's start, cuBLAS's kernels
# loaded under it), at most 100 s each.
for m in dp ddp; do
  fig="memcheck $m"
  dc_step "compute-sanitizer memcheck, $m" 45 "$fig" || continue
  if [ -z "$sanitizer" ]; then
    figure "$fig" "compute-sanitizer not found" "0 errors" SKIP
    continue
  fi
  run -t 100 -o "$res/memcheck-$m.log" "$sanitizer" --tool memcheck --target-processes all \
    --error-exitcode 9 "$bin" run --backend "$backend" --mode "$m" --model tiny --steps 2 --warmup 1 \
    --out "$res" --name "memcheck-$m"
  rc=$?
  dc_was_skipped "$fig" "$rc" || dc_figures_from "$fig" "${summary[@]}" sanitizer "$fig" \
    "$res/memcheck-$m.log" "$rc"
done

# ncu on a tiny dp run, 5 kernels inside dpscale's "step" ranges (domain
# "dpscale", registered string "step": the filter is dpscale@step/), one
# metric each: ~40 s, at most 120 s; then the report read back twice: ~10 s.
if dc_step "Nsight Compute, kernels inside the step ranges" 60 "ncu step kernels" "ncu step report"; then
  if [ -z "$ncu" ]; then
    figure "ncu step kernels" "ncu not found" ">= 1, no ncu error" SKIP
    figure "ncu step report" "ncu not found" "range named" SKIP
  else
    run -t 120 -o "$res/ncu-capture.log" "$ncu" --nvtx --nvtx-include "dpscale@step/" \
      --launch-count 5 --clock-control none --metrics gpu__time_duration.sum \
      --target-processes all -f -o "$res/ncu-step" \
      "$bin" run --backend "$backend" --mode dp --model tiny --steps 4 --warmup 1 --out "$res" --name ncu
    rc=$?
    if [ "$rc" -eq "$DC_SKIP_RC" ]; then
      figure "ncu step kernels" "skipped (deadline)" ">= 1, no ncu error" SKIP
      figure "ncu step report" "skipped (deadline)" "range named" SKIP
    else
      run -t 60 -o "$res/ncu-import.log" "$ncu" --import "$res/ncu-step.ncu-rep"
      run -t 60 -o "$res/ncu-import-rename.log" "$ncu" --import "$res/ncu-step.ncu-rep" \
        --print-nvtx-rename kernel --print-summary per-kernel
      cat "$res/ncu-import-rename.log" >>"$res/ncu-import.log"
      dc_figures_from "ncu step kernels" "${summary[@]}" ncu "ncu step" "$res/ncu-capture.log" \
        "$res/ncu-import.log" step
      if ! grep -q '==PROF== Profiling ' "$res/ncu-capture.log" && [ "$(dc_left)" -gt 40 ]; then
        echo "device-check: no kernel matched dpscale@step/; the same run unfiltered, to show the ranges ncu sees:"
        run -t 60 -o "$res/ncu-unfiltered.log" "$ncu" --nvtx --launch-count 3 --clock-control none \
          --metrics gpu__time_duration.sum --target-processes all \
          "$bin" run --backend "$backend" --mode dp --model tiny --steps 2 --warmup 1 --out "$res" \
          --name ncu-unfiltered
      fi
    fi
  fi
fi

dc_step "done" 0
if cut -f4 "$out/summary.tsv" | grep -qx FAIL; then
  exit 1
fi
exit 0
