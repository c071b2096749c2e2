#!/usr/bin/env bash
# The GPU checks of dpscale in one pass of under 8 minutes, build included,
# on a machine with NVIDIA GPUs whose image has nvcc, meson, ninja and
# PyTorch but no package registry. Each figure is asserted against a goal:
# a line (name, value, goal, PASS/FAIL/SKIP/INFO) in OUTDIR/summary.txt,
# written even when a step fails or hangs or the build fails, and below
# them the goals each group of figures serves, met or not; past the
# deadline the remaining steps are recorded as 'skipped (deadline)'.
# Everything printed is in OUTDIR/device-check.log, the results folders in
# OUTDIR/results.tar.gz. Exit status 1 when a figure failed. The figures
# are computed by scripts/device_check_compare.py (against PyTorch's
# results, scripts/torch_reference.py), device_check_summary.py and
# device_check_backend.py.
#   scripts/device-check.sh OUTDIR
#
# Steps, crash detectors first, and their estimated time on one H200 (16 cores):
#   machine 5 s, build 45 s, info 3 s
#   0 strict mode on the host backend (--strict): dp and ddp on 2 emulated
#     devices, a model file, 3 steps, --check: the row "strict mode on the
#     host", so the stream contracts are known to hold on the CPU first: ~3 s
#   1 the main job: bench/default.suite's dp and ddp configurations on every
#     GPU here (resnet50, gpt2, bert-large, gpt2-mlp in fp32), each in its
#     own process as `ninja -C build bench` runs them, 2 steps: every one
#     ends ok: 4 a mode of ~3-5 s each (process, NCCL and cuBLAS start): ~50 s
#   2 compute-sanitizer memcheck on tiny dp and ddp runs, dpscale's own
#     errors counted (NCCL's probing of its kernels apart): 2 x ~30 s; the
#     build's GPU tests (suite gpu, unit cuda_ops): ~60 s
#   3 losses against PyTorch (small, 20 steps, the host tests' learning
#     rates; --check too): SGD and AdamW x fp32 (TF32 off) and bf16, dp on
#     every GPU, and ddp on 2+ GPUs (on one its loss is dp's): 4 pairs of
#     ~3 s + ~8 s on one GPU (8 on 2+, ddp ~12 s): ~45 s (~100 s)
#   4 several ranks on GPU 0: dp --devices 0,0 fp32 and bf16, ddp with two
#     ranks over NCCL's network transport (host-staged): ~20 s
#   5 a model file (resnet50) against PyTorch running its ops, dp and ddp on
#     every GPU, fp32, with --check: 2 pairs of ~5 s + ~10 s: ~30 s;
#     ddp --accum 4 under no_sync and dp fp16 with its GradScaler against
#     PyTorch, with --check: 2 pairs of ~3 s + ~10 s: ~25 s; fsdp on one GPU
#     against PyTorch's FSDP (torchrun, one process), fp32: losses, and both
#     peaks reported: ~3 s + ~15 s: ~20 s
#   6 memory and speed against PyTorch, bf16, one GPU: dp medium, ddp
#     medium, dp gpt2-mlp (memory: per-device peak within 10 %; step <= 0.85
#     x PyTorch's, PyTorch timed with one synchronize a step; gpt2-mlp's
#     loss phase <= 1.0 x PyTorch's): ~50 s; gpt2-mlp --gemm-ref (TFLOP/s >=
#     0.85 x the GEMMs alone; the GEMM-free phases' share of the step): ~8 s
#   6b against PyTorch's real modules, one GPU, fp32 and bf16, 3 steps: torchvision's
#     resnet50, transformers' GPT2LMHeadModel and BertForMaskedLM (or torch_reference.py
#     on the model files without transformers): step <= 1.05 x theirs, device 0's peak
#     within 10 %: 6 pairs, ~140 s
#   7 on 2+ GPUs: ddp medium (3 buckets, overlap asserted), dp medium (4
#     coalescing groups), ddp AdamW, --grad-as-bucket-view, --no-overlap,
#     --dp-impl lean, each --check: ~30 s (skipped on one GPU)
#   8 counters: a sweep with links (NVML columns in its children's rows),
#     the same bits twice, NVML's PCIe bytes against a links run: ~30 s
#   9 failure paths: --inject-fault exit and hang (--timeout 10): ~25 s
#   10 what --no-nvtx and --no-nvml save 20 s, links against PyTorch's
#     copies 12 s, ncu ~60 s
# about 650 s in all on one GPU by these estimates (324 s measured on one H200 before 6b, so
# ~465 s with it), against 470 s less a reserve of 20: the last of 10 (ncu first) is what the
# deadline leaves out.
# Environment: DC_BUDGET (seconds, default 470) and the other settings of
# scripts/device-check-lib.sh. DC_BACKEND=host rehearses every step on a
# machine without a GPU (dpscale's emulated devices, PyTorch on the CPU, fp32
# and smaller presets where the GPU's need bf16, the suite's [host] presets
# for the main job): a figure that needs a GPU is then SKIP with its reason
# and what the rehearsal computed; the checks of dpscale alone (--check, the
# main job, the failure paths) keep their PASS/FAIL.
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
# the first python3 with PyTorch (the scripts' own need only numpy)
# shellcheck source-path=SCRIPTDIR source=python.sh
. "$root/scripts/python.sh"
py=$(dps_python torch) || true
summary=("$py" "$root/scripts/device_check_summary.py")
backend=${DC_BACKEND:-cuda}
host=0
[ "$backend" = host ] && host=1
cmp=("$py" "$root/scripts/device_check_compare.py")
gcmp=("${cmp[@]}") # a GPU figure: on the host backend a rehearsal, recorded SKIP
[ "$host" = 1 ] && gcmp+=(--rehearsal "not a GPU figure: host backend (DC_BACKEND=host)")

# shellcheck disable=SC2317 # called from the EXIT trap
pack() {
  if [ -d "$res" ] && tar -czf "$out/results.tar.gz" -C "$out" results; then
    rm -rf "$res"
    echo "device-check: results folders packed into $out/results.tar.gz"
  fi
}
dc_at_exit pack

# shellcheck disable=SC2317 # called from the EXIT trap
goals() { # the goals block under summary.txt's figures
  { echo; "${summary[@]}" goals "$out/summary.tsv"; } >>"$out/summary.txt" 2>&1
}
dc_at_exit goals

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

# dpscale run OPTIONS... into $res/NAME.
dps() {
  local name=$1
  shift
  run "$bin" run --backend "$backend" "$@" --out "$res" --name "$name"
}

# PyTorch's run of the same options into $res/NAME (on the CPU on the host backend).
tref() {
  local name=$1
  shift
  run "$py" scripts/torch_reference.py --device "$tdev" --dpscale "$bin" "$@" --out "$res" \
    --name "$name"
}

# FIG as SKIP with REASON for each FIG after it.
skip_all() {
  local why=$1 f
  shift
  for f in "$@"; do figure "$f" "$why" "-" SKIP; done
}

# ddp with two ranks started as a launcher would (one process each, meeting
# through rank 0's store), rank R on CUDA device ${cvd[R]}; told apart by
# NCCL as two hosts (NCCL_HOSTID: no P2P or shared memory between them, and
# no refusal of two ranks on one GPU), so NCCL's network transport, staged
# through host memory, carries the all-reduce. Each rank's status in
# two_rc (124: killed after two_timeout seconds); returns rank 0's, or rank
# 1's when rank 0's is 0.
two_rc=()
two_timeout=120
two_ranks() {
  local name=$1 port=$((29900 + RANDOM % 1000)) r pids=()
  shift
  two_rc=()
  for r in 0 1; do
    env OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 \
      OMPI_COMM_WORLD_LOCAL_SIZE=1 MASTER_ADDR=127.0.0.1 DPSCALE_PORT=$port \
      CUDA_VISIBLE_DEVICES="${cvd[$r]}" NCCL_HOSTID="dpscale-node$r" NCCL_SOCKET_IFNAME=lo \
      NCCL_IB_DISABLE=1 timeout "$two_timeout" "$bin" run --backend "$backend" --mode ddp --comm "$two_comm" \
      "$@" --out "$res" --name "$name" >"$res/$name-rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    wait "${pids[$r]}"
    two_rc+=($?)
  done
  tail -n 3 "$res/$name-rank0.log" "$res/$name-rank1.log"
  [ "${two_rc[0]}" -ne 0 ] && return "${two_rc[0]}"
  return "${two_rc[1]}"
}

ngpu=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$ngpu" -ge 1 ] || ngpu=1
tdev=cuda
[ "$host" = 1 ] && tdev=cpu
# the learning rates and steps at which a loss sees a wrong hyper-parameter (the host tests')
read -r lr_sgd lr_adamw fid_steps < <(PYTHONPATH=scripts "$py" -c 'from dpstools import torch_model as t
print(t.FIDELITY_LR["sgd"], t.FIDELITY_LR["adamw"], t.FIDELITY_STEPS)' 2>/dev/null || echo "0.1 0.01 20")
# the main job's figure a mode
main_figs=("main job dp gpus=$ngpu" "main job ddp gpus=$ngpu")
# ddp on one device runs no collective and trains as dp: its loss pairs on 2+ GPUs only
loss_modes=(dp)
[ "$ngpu" -ge 2 ] && loss_modes+=(ddp)
loss_cfgs=()
for p in fp32 bf16; do for o in sgd adamw; do for m in "${loss_modes[@]}"; do
  loss_cfgs+=("$m $p $o")
done; done; done
loss_figs=()
for c in "${loss_cfgs[@]}"; do
  read -r m p o <<<"$c"
  loss_figs+=("loss $m $p $o vs torch gpus=$ngpu" "check $m $p $o gpus=$ngpu")
done
# the speed and memory configurations: bf16 on a GPU; rehearsed in fp32 on smaller presets
sp=bf16 m1=medium m2=gpt2-mlp
[ "$host" = 1 ] && sp=fp32 m1=small m2=medium
mem_figs=("memory dp medium bf16 vs torch" "step dp medium bf16 vs torch" "memory ddp medium bf16 vs torch"
  "memory dp gpt2-mlp bf16 vs torch" "step dp gpt2-mlp bf16 vs torch" "phase loss dp gpt2-mlp bf16 vs torch")
gemm_figs=("TFLOP/s gpt2-mlp bf16 vs GEMMs" "non-GEMM share gpt2-mlp bf16")
# dpscale against PyTorch's real modules (6b): torchvision's resnet50, transformers' GPT-2 and
# BERT (where transformers is not installed, torch_reference.py on the model files instead)
tf_vs=torch_reference
timeout 120 "$py" -c 'import transformers' >/dev/null 2>&1 && tf_vs=transformers
real_figs=()
for p in fp32 bf16; do for m in resnet50 gpt2 bert-large; do
  v=$tf_vs
  [ "$m" = resnet50 ] && v=torchvision
  real_figs+=("step real $m $p vs $v" "memory real $m $p vs $v")
done; done
one_figs=("check dp fp32 devices=0,0" "check dp bf16 devices=0,0" "check ddp 2 ranks nccl-net")
mg=2
mg_figs=("check ddp medium gpus=$mg" "overlap ddp medium gpus=$mg" "check dp medium gpus=$mg"
  "check ddp adamw gpus=$mg" "check ddp grad-as-bucket-view gpus=$mg" "check ddp no-overlap gpus=$mg"
  "check dp-impl lean gpus=$mg")
lgpus=$((ngpu > 1 ? 2 : 1))
links_paths=(h2d:host:dev0 d2h:dev0:host)
[ "$lgpus" -gt 1 ] && links_paths+=(d2d_write:dev0:dev1)
links_figs=()
for l in "${links_paths[@]}"; do
  IFS=: read -r lm ls ld <<<"$l"
  links_figs+=("links $lm $ls->$ld")
done
mf_model=resnet50
[ "$host" = 1 ] && mf_model=tests/fixtures/models/tiny-gpt.model
file_figs=()
for m in dp ddp; do file_figs+=("loss $m model file vs torch gpus=$ngpu" "check $m model file gpus=$ngpu"); done
acc_cfgs=("ddp fp32 accum" "dp fp16 scaler")
acc_figs=()
for c in "${acc_cfgs[@]}"; do
  read -r m p w <<<"$c"
  acc_figs+=("loss $m $p $w vs torch gpus=$ngpu" "check $m $p $w gpus=$ngpu")
done
fsdp_figs=("loss fsdp fp32 sgd vs torch fsdp gpus=1" "memory fsdp fp32 sgd vs torch fsdp gpus=1")
dc_plan build "dpscale info" "strict mode on the host" "${main_figs[@]}" "memcheck dp" "memcheck ddp" "gpu tests" "${loss_figs[@]}" \
  "${one_figs[@]}" "${file_figs[@]}" "${acc_figs[@]}" "${fsdp_figs[@]}" "${mem_figs[@]}" \
  "${gemm_figs[@]}" "${real_figs[@]}" "${mg_figs[@]}" "sweep dp,ddp gpus=1" "params same bits" "nvml pcie in sweep" \
  "nvml bytes on links" "fault exit rank 1" "fault hang rank 1 --timeout" "no-nvtx cost" \
  "no-nvml cost" "${links_figs[@]}" "ncu step kernels" "ncu step report"
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
      nccl_opt=(-Dnccl=enabled "-Dnccl-root=$shim")
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

# 0. Strict mode on the host backend before the first GPU step: dp and ddp on 2 emulated devices,
# a model file (tiny-gpt, its norms, attention and loss), 3 steps, --check, --strict (stream,
# pointer and size checks as CUDA's, the race detector, device memory the host cannot touch;
# docs/DESIGN.md "Strict mode"): a contract broken here fails on the GPUs too, named on the CPU
# first. ~1 s a run here, ~3 s on 2 cores.
strict_fig="strict mode on the host"
if dc_step "strict mode on the host: dp and ddp, 2 devices, a model file, --check" 15 "$strict_fig"; then
  strict_runs=()
  for m in dp ddp; do
    run -t 20 -o "$res/strict-$m.log" "$bin" run --backend host --strict --mode "$m" --gpus 2 \
      --model tests/fixtures/models/tiny-gpt.model --steps 3 --warmup 1 --check \
      --out "$res" --name "strict-$m"
    strict_runs+=("$res/strict-$m" $? "$res/strict-$m.log")
  done
  if ! dc_was_skipped "$strict_fig" "${strict_runs[4]}"; then
    dc_figures_from "$strict_fig" "${summary[@]}" strict "$strict_fig" "${strict_runs[@]}"
  fi
fi

# 1. The main job as `ninja -C build bench` runs it (scripts/bench.sh): bench/default.suite's
# dp and ddp configurations, each in a process of its own, here on all $ngpu device(s), 2 timed
# steps after 1 of warm-up: every one must end ok, so that a crash in a model's set-up cannot
# pass unseen. On GPUs the suite's [cuda] models (the model files resnet50, gpt2 and
# bert-large, and gpt2-mlp), on the host backend its [host] presets. The configurations run are
# the suite's own, chosen by --filter (dc_main_filter): fp32 with SGD, weak scaling (strong
# scaling on all the devices runs the same batch again). A mode's plan (--dry-run) lists what
# must end ok: ~3-5 s a configuration (its process, cuBLAS and NCCL starting, the model built),
# 4 a mode and the sweep's untimed warm-up of its first: ~25 s a mode.
main_job() { # MODE FIG FILTER
  local mode=$1 fig=$2 filter=$3 rc
  local sweep=(sweep bench/default.suite --backend "$backend" --steps 2 --warmup 1 --no-links
    --config-timeout 60 --filter "$filter" --out "$res" --name "main-$mode")
  run -t 30 -o "$res/main-$mode-plan.txt" "$bin" "${sweep[@]}" --dry-run
  rc=$?
  if [ "$rc" -ne "$DC_SKIP_RC" ]; then
    run -t 150 "$bin" "${sweep[@]}"
    rc=$?
  fi
  dc_was_skipped "$fig" "$rc" || dc_figures_from "$fig" "${summary[@]}" suite "$fig" \
    "$res/main-$mode-plan.txt" "$res/main-$mode" "$rc"
}
if dc_step "the main job: bench/default.suite's dp configurations on $ngpu device(s)" 25 \
    "${main_figs[0]}"; then
  main_job dp "${main_figs[0]}" "$(dc_main_filter dp "$ngpu")"
fi
if dc_step "the main job: bench/default.suite's ddp configurations on $ngpu device(s)" 30 \
    "${main_figs[1]}"; then
  main_job ddp "${main_figs[1]}" "$(dc_main_filter ddp "$ngpu")"
fi

# 2. compute-sanitizer's memcheck on tiny runs, early (a slow machine must not leave it out):
# ~30 s each (the tool's start, cuBLAS's kernels loaded under it), at most 100 s each. CUDA API
# errors are reported (its default): those raised inside NCCL (its probing of its kernels) are
# counted apart and do not fail the figure; dpscale's own errors do.
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
    "$res/memcheck-$m.log" "$rc" "$res/memcheck-$m"
done

# 2b. The build's GPU tests (tests/test_gpu.py: --check and the losses against the host backend's,
# odd class counts and the fused loss included; the unit group cuda_ops: gemm_bias, GELU and
# the fused backward against exact sums; NCCL's non-blocking set-up): ~60 s.
if dc_step "the GPU tests (meson's suite gpu, unit cuda_ops)" 60 "gpu tests"; then
  if [ "$host" = 1 ]; then
    figure "gpu tests" "not a GPU figure: they skip without a GPU" "none fails" SKIP
  else
    dc_figures_from "gpu tests" "$py" scripts/device_check_backend.py gpu-tests "gpu tests" \
      "$root/build-gpu" "$py" "$res/gpu-tests.log"
  fi
fi

# dpscale's run of OPTS (with --check: figure CFIG) and PyTorch's, every step's loss compared
# at PRECISION's tolerance (figure LFIG).
loss_pair() { # NAME LFIG CFIG PRECISION OPTS...
  local name=$1 lfig=$2 cfig=$3 p=$4 rc
  shift 4
  dps "$name" "$@" --check
  dps_figure "$cfig" $? check "$res/$name"
  tref "$name-torch" "$@"
  rc=$?
  dc_was_skipped "$lfig" "$rc" || dc_figures_from "$lfig" "${gcmp[@]}" losses "$lfig" \
    "$res/$name" "$res/$name-torch" "$p"
}

# 3. Losses against PyTorch: the same seed, shapes, optimizer and learning rate, every step's
# loss within torch_reference.py's LOSS_TOL (fp32: --tf32 default leaves the MLP's Linears out of
# TF32 in both) or LOSS_TOL_BF16; dpscale's
# run with --check also trains on one device. dp, and ddp on 2+ GPUs (on one, ddp runs no
# collective: its losses are dp's). dpscale ~3 s, PyTorch ~8 s (ddp ~12 s) a pair.
for c in "${loss_cfgs[@]}"; do
  read -r m p o <<<"$c"
  lfig="loss $m $p $o vs torch gpus=$ngpu" cfig="check $m $p $o gpus=$ngpu"
  dc_step "loss against PyTorch: $m $p $o on $ngpu device(s)" 16 "$lfig" "$cfig" || continue
  if [ "$host" = 1 ] && [ "$p" = bf16 ]; then
    skip_all "not a GPU figure: the host backend has no bf16" "$lfig" "$cfig"
    continue
  fi
  lr=$lr_sgd
  [ "$o" = adamw ] && lr=$lr_adamw
  opts=(--mode "$m" --gpus "$ngpu" --model small --precision "$p" --optimizer "$o" --lr "$lr"
    --steps "$fid_steps" --warmup 0)
  loss_pair "loss-$m-$p-$o" "$lfig" "$cfig" "$p" "${opts[@]}"
done

# 4. Several ranks on GPU 0, early: on one GPU they are the check's only runs of several
# ranks. dp: two replicas through copies, ~4 s each. ddp: two ranks over NCCL's network
# transport (on 2+ GPUs each on its own), ~10 s; on the host backend over Gloo.
for p in fp32 bf16; do
  fig="check dp $p devices=0,0"
  dc_step "dp with two replicas on GPU 0, $p" 8 "$fig" || continue
  if [ "$host" = 1 ]; then
    figure "$fig" "not a GPU figure: several replicas on one device run on the cuda backend only" \
      "status ok, check pass" SKIP
    continue
  fi
  dps "check-dp-$p-00" --mode dp --devices 0,0 --precision "$p" --model small --steps 10 --check
  dps_figure "$fig" $? check "$res/check-dp-$p-00"
done
cvd=(0 0)
[ "$ngpu" -ge 2 ] && cvd=(0 1)
two_comm=nccl
[ "$host" = 1 ] && two_comm=gloo
if dc_step "ddp, two ranks on GPU(s) ${cvd[*]} over $two_comm (NCCL: its network transport)" 15 \
    "${one_figs[2]}"; then
  two_ranks two-ranks --model small --steps 10 --check --timeout 60
  dps_figure "${one_figs[2]}" $? check "$res/two-ranks"
fi

# 5. A model file, the real resnet50 (the fixture tiny-gpt rehearsed on the host): its ops'
# kernels (resample, col_scale, mul among them) against torch_reference.py running the same
# ops, every step's loss within LOSS_TOL, and --check; --tf32 off in both, so that the
# convolutions' GEMMs are fp32's (in TF32 the GPU's rounding of the operands, which NVIDIA
# does not document, is not torch_graph's). ~5 s and ~10 s a pair.
for m in dp ddp; do
  lfig="loss $m model file vs torch gpus=$ngpu" cfig="check $m model file gpus=$ngpu"
  dc_step "model file against PyTorch: $m on $ngpu device(s)" 16 "$lfig" "$cfig" || continue
  opts=(--mode "$m" --gpus "$ngpu" --model "$mf_model" --batch $((2 * ngpu)) --steps 5 --warmup 1
    --tf32 off)
  dps "file-$m" "${opts[@]}" --check
  dps_figure "$cfig" $? check "$res/file-$m"
  tref "file-$m-torch" "${opts[@]}"
  rc=$?
  dc_was_skipped "$lfig" "$rc" || dc_figures_from "$lfig" "${cmp[@]}" losses "$lfig" \
    "$res/file-$m" "$res/file-$m-torch" fp32
done

# 5b. The loops people run, against PyTorch: ddp with --accum 4 (micro-steps under no_sync,
# the last all-reduced) and dp in fp16 with its GradScaler (torch.cuda.amp's), every step's
# loss within LOSS_TOL or LOSS_TOL_FP16, and --check. ~3 s and ~10 s a pair.
for c in "${acc_cfgs[@]}"; do
  read -r m p w <<<"$c"
  lfig="loss $m $p $w vs torch gpus=$ngpu" cfig="check $m $p $w gpus=$ngpu"
  dc_step "$w against PyTorch: $m $p on $ngpu device(s)" 16 "$lfig" "$cfig" || continue
  if [ "$host" = 1 ] && [ "$p" = fp16 ]; then
    skip_all "not a GPU figure: PyTorch's CPU has no fp16 autocast or GradScaler" "$lfig" "$cfig"
    continue
  fi
  opts=(--mode "$m" --gpus "$ngpu" --model small --precision "$p" --lr "$lr_sgd"
    --steps "$fid_steps" --warmup 0)
  [ "$w" = accum ] && opts+=(--accum 4)
  loss_pair "acc-$m-$p" "$lfig" "$cfig" "$p" "${opts[@]}"
done

# dpscale --mode fsdp's run of OPTS and PyTorch's FSDP (torch_reference.py --mode ddp --fsdp:
# FULL_SHARD, a unit per Linear) under torchrun, a process a GPU: every step's loss compared at
# PRECISION's tolerance (figure LFIG; the runs matched by their columns, as PyTorch's carries
# ddp's config_id), and each one's peak memory reported (MFIG: dpscale's memory.csv by kind,
# PyTorch's max_memory_allocated).
fsdp_pair() { # NAME LFIG MFIG PRECISION OPTS...
  local name=$1 lfig=$2 mfig=$3 p=$4 rc
  shift 4
  dps "$name" --mode fsdp --precision "$p" "$@"
  if [ $? -eq "$DC_SKIP_RC" ]; then
    skip_all "skipped (deadline)" "$lfig" "$mfig"
    return 0
  fi
  # -r 2 -t 2: Debian's torchrun (PyTorch 1.13) under Python 3.11 fails without them
  run "$py" -m torch.distributed.run -r 2 -t 2 --standalone --nproc_per_node "$ngpu_fsdp" \
    scripts/torch_reference.py --device "$tdev" --dpscale "$bin" --mode ddp --fsdp \
    --precision "$p" "$@" --out "$res" --name "$name-torch"
  rc=$?
  if dc_was_skipped "$lfig" "$rc"; then
    figure "$mfig" "skipped (deadline)" "-" SKIP
    return 0
  fi
  dc_figures_from "$lfig" "${gcmp[@]}" sharded_losses "$lfig" "$res/$name" "$res/$name-torch" "$p"
  dc_figures_from "$mfig" "${gcmp[@]}" sharded_memory "$mfig" "$res/$name" "$res/$name-torch"
}

# 5c. FSDP against PyTorch's FSDP on one GPU (world size 1: this machine's GPU, or the first of
# several), fp32, SGD at the host tests' rate: every step's loss within LOSS_TOL, and the peaks
# reported. SKIP where dpscale refuses --mode fsdp (its dry run says so), and on the host
# backend, where PyTorch 1.13 under Python 3.11 cannot import FSDP. PyTorch's FSDP on a world
# of one runs as NO_SHARD (it warns so), one unsharded copy: its peak is reported, not held to
# a goal. ~3 s and ~15 s.
ngpu_fsdp=1
if dc_step "FSDP against PyTorch's FSDP on the GPU" 25 "${fsdp_figs[@]}"; then
  if [ "$host" = 1 ]; then
    skip_all "not a GPU figure: PyTorch's FSDP needs PyTorch 2.x (1.13 under Python 3.11 cannot import it)" \
      "${fsdp_figs[@]}"
  else
    run -t 60 -o "$res/fsdp-dry-run.log" "$bin" run --backend "$backend" --mode fsdp \
      --gpus "$ngpu_fsdp" --model small --dry-run
    rc=$?
    if [ "$rc" -eq "$DC_SKIP_RC" ]; then
      skip_all "skipped (deadline)" "${fsdp_figs[@]}"
    elif [ "$rc" -ne 0 ]; then
      skip_all "skipped: dpscale refuses --mode fsdp ($(tail -n 1 "$res/fsdp-dry-run.log"))" \
        "${fsdp_figs[@]}"
    else
      fsdp_pair fsdp "${fsdp_figs[@]}" fp32 --gpus "$ngpu_fsdp" --model small --optimizer sgd \
        --lr "$lr_sgd" --steps "$fid_steps" --warmup 0
    fi
  fi
fi

# 6. Memory and speed against PyTorch on one GPU, bf16: the per-device allocation peak within
# 10 % of torch.cuda.max_memory_allocated; the step at most 0.85 x PyTorch's (timed with one
# synchronize a step, its wait for Python printed beside); gpt2-mlp's loss phase at most 1.0 x
# PyTorch's (the loss's forward and backward to the logits' gradient in both).
# medium: dpscale ~3 s, PyTorch ~8 s; ddp ~4 s and ~12 s; gpt2-mlp ~6 s and ~15 s.
pair() { # NAME MODE MODEL: dpscale's and PyTorch's runs; 0 when both ran
  local name=$1 mode=$2 model=$3 rc
  local opts=(--mode "$mode" --gpus 1 --model "$model" --precision "$sp" --steps 10 --warmup 3)
  dps "$name" "${opts[@]}"
  rc=$?
  [ "$rc" -eq "$DC_SKIP_RC" ] && return "$rc"
  tref "$name-torch" "${opts[@]}"
  rc=$?
  [ "$rc" -eq "$DC_SKIP_RC" ] && return "$rc"
  return 0
}
# One step of part 6: NAME MODE MODEL BUDGET MEMORY_FIG [STEP_FIG [PHASE_FIG]]: the pair of
# runs, then the memory figure (within 10 %), the step-time figure (at most 0.85 x) and the
# loss phase's (at most 1.0 x) when given.
mem_step() {
  local name=$1 mode=$2 model=$3 budget=$4 figs=("${@:5}")
  local what="memory${figs[1]:+ and step time}${figs[2]:+ and the loss phase}"
  dc_step "$what against PyTorch: $mode $model $sp" "$budget" "${figs[@]}" || return 0
  if ! pair "$name" "$mode" "$model"; then
    skip_all "skipped (deadline)" "${figs[@]}"
    return 0
  fi
  dc_figures_from "${figs[0]}" "${gcmp[@]}" memory "${figs[0]}" "$res/$name" "$res/$name-torch" 0.10
  [ -n "${figs[1]:-}" ] || return 0
  dc_figures_from "${figs[1]}" "${gcmp[@]}" step "${figs[1]}" "$res/$name" "$res/$name-torch" 0.85
  [ -n "${figs[2]:-}" ] || return 0
  dc_figures_from "${figs[2]}" "${gcmp[@]}" phase "${figs[2]}" "$res/$name" "$res/$name-torch" \
    loss 1.0
}
mem_step sp-dp-m1 dp "$m1" 15 "${mem_figs[@]:0:2}"
mem_step sp-ddp-m1 ddp "$m1" 20 "${mem_figs[2]}"
mem_step sp-dp-m2 dp "$m2" 25 "${mem_figs[@]:3:3}"
# gpt2-mlp with its GEMMs timed alone on the same data shapes (random, as the model's): ~8 s. The
# phases that run no GEMM (load, loss, optimizer, dp's copies, the exposed all-reduce), timed
# by their NVTX ranges, at most 10 % of the step.
if dc_step "TFLOP/s against the GEMMs alone: gpt2-mlp $sp" 10 "${gemm_figs[@]}"; then
  dps tflops --mode dp --gpus 1 --model "$m2" --precision "$sp" --steps 10 --warmup 3 --gemm-ref
  rc=$?
  if ! dc_was_skipped "${gemm_figs[0]}" "$rc"; then
    dc_figures_from "${gemm_figs[0]}" "${gcmp[@]}" tflops "${gemm_figs[0]}" "$res/tflops" 0.85
    dc_figures_from "${gemm_figs[1]}" "${gcmp[@]}" nongemm "${gemm_figs[1]}" "$res/tflops" 0.10
  else
    skip_all "skipped (deadline)" "${gemm_figs[1]}"
  fi
fi

# 6b. dpscale against the modules its model files stand for, as PyTorch runs them: one GPU, fp32
# and bf16, 3 timed steps after 2 of warm-up, the presets' batches. torchvision's resnet50
# (torch.backends.cudnn.benchmark on; PyTorch's default TF32 flags, convolutions in TF32 and
# matmuls not, as dpscale's --tf32 default) from the parameters of bench/models/resnet50.model,
# against dpscale's run of that file; transformers' GPT2LMHeadModel (1024 tokens) and
# BertForMaskedLM (24 x 1024, 512 tokens), dropout 0 (dpstools.real_modules), against gpt2 and
# bert-large; without transformers, torch_reference.py runs those model files (dpscale's maths
# and attention, the same precision and TF32 flags). Each pair: dpscale's median step at most
# 1.05 x PyTorch's, device 0's peak within 10 % of max_memory_allocated; a missed goal is a FAIL
# line and the check goes on. Rehearsed on the host in fp32 (no bf16 there) at tiny shapes:
# resnet50 at 3x32x32 (its file exported here), tiny-gpt and tiny-bert, batch 2.
# A precision on one H200: resnet50 ~6 s + ~12 s, gpt2 ~8 s + ~15 s, bert-large ~10 s + ~20 s.
# MODEL's pair: real_common (both runs' batch and steps), real_dps (dpscale's model) and
# real_torch (PyTorch's: the real module, or the model file without transformers); 1 when a
# rehearsal's file could not be exported.
real_args() {
  local m=$1 file spec shape
  if [ "$host" = 0 ]; then
    real_common=(--batch 8 --steps 3 --warmup 2) real_dps=(--model "$m") file=bench/models/$m.model
    [ "$m" = resnet50 ] && real_common[1]=32
    case $m in
      gpt2) spec=dpstools.real_modules:gpt2_lm shape=(--input 1024 --tokens) ;;
      bert-large) spec=dpstools.real_modules:bert_mlm shape=(--input 512 --tokens) ;;
    esac
  else
    real_common=(--batch 2 --steps 2 --warmup 1)
    case $m in
      resnet50) file=$res/resnet50-32.model ;;
      gpt2) file=tests/fixtures/models/tiny-gpt.model spec=dpstools.real_modules:tiny_gpt2_lm
        shape=(--input 16 --tokens) ;;
      bert-large) file=$res/tiny-bert.model spec=dpstools.real_modules:tiny_bert_mlm
        shape=(--input 16 --tokens) ;;
    esac
    real_dps=(--model "$file")
    if [ ! -f "$file" ] && [ "$m" = resnet50 ]; then
      run -t 60 "$py" scripts/model_export.py torchvision.models:resnet50 --input 3x32x32 \
        --out "$file" || return 1
    elif [ ! -f "$file" ]; then
      run -t 60 "$py" scripts/model_export.py dpstools.reference_models:tiny_bert --input 16 \
        --tokens --out "$file" || return 1
    fi
  fi
  if [ "$m" = resnet50 ]; then
    real_torch=(--module torchvision.models:resnet50 --model "$file" --cudnn-benchmark)
  elif [ "$tf_vs" = transformers ]; then
    real_torch=(--module "$spec" "${shape[@]}")
  else
    real_torch=("${real_dps[@]}")
  fi
}
for p in fp32 bf16; do for m in resnet50 gpt2 bert-large; do
  v=$tf_vs
  [ "$m" = resnet50 ] && v=torchvision
  sfig="step real $m $p vs $v" mfig="memory real $m $p vs $v"
  need=25
  [ "$m" = bert-large ] && need=35
  dc_step "dpscale against PyTorch's real module: $m $p (against $v)" "$need" "$sfig" "$mfig" \
    || continue
  if [ "$host" = 1 ] && [ "$p" = bf16 ]; then
    skip_all "not a GPU figure: the host backend has no bf16" "$sfig" "$mfig"
    continue
  fi
  if ! real_args "$m"; then
    for f in "$sfig" "$mfig"; do figure "$f" "no figure: model_export.py failed (see device-check.log)" "-" FAIL; done
    continue
  fi
  name="real-$m-$p"
  dps "$name" --mode dp --gpus 1 --precision "$p" "${real_dps[@]}" "${real_common[@]}"
  rc=$?
  if [ "$rc" -eq "$DC_SKIP_RC" ]; then
    skip_all "skipped (deadline)" "$sfig" "$mfig"
    continue
  fi
  tref "$name-torch" --mode dp --gpus 1 --precision "$p" "${real_torch[@]}" "${real_common[@]}"
  rc=$?
  if dc_was_skipped "$sfig" "$rc"; then
    figure "$mfig" "skipped (deadline)" "-" SKIP
    continue
  fi
  dc_figures_from "$sfig" "${gcmp[@]}" real_step "$sfig" "$res/$name" "$res/$name-torch" 1.05
  dc_figures_from "$mfig" "${gcmp[@]}" real_memory "$mfig" "$res/$name" "$res/$name-torch" 0.10
done; done
# 7. On 2+ GPUs (on the host backend, 2 emulated devices): NCCL's dp and ddp on medium (9.4 M
# parameters: ddp's 3 buckets of a 1 MiB first and 25 MiB others, dp's 4 coalescing groups of
# 10 MiB), the all-reduce overlapped with backward, the variants, each --check: ~5 s each.
mg_steps=(--steps 10 --warmup 3)
[ "$host" = 1 ] && mg_steps=(--steps 3 --warmup 1)
mg_run() { # FIG NAME OPTIONS...: one --check run on $mg devices
  local fig=$1 name=$2
  shift 2
  dps "$name" --gpus "$mg" "${mg_steps[@]}" --check "$@"
  dps_figure "$fig" $? check "$res/$name"
}
if dc_step "dp and ddp on $mg GPUs" 30 "${mg_figs[@]}"; then
  if [ "$host" = 0 ] && [ "$ngpu" -lt 2 ]; then
    skip_all "skipped: $ngpu GPU here, these need 2 or more" "${mg_figs[@]}"
  else
    mg_run "${mg_figs[0]}" mg-ddp --mode ddp --model medium
    dc_figures_from "${mg_figs[1]}" "${gcmp[@]}" overlap "${mg_figs[1]}" "$res/mg-ddp" 0.5
    mg_run "${mg_figs[2]}" mg-dp --mode dp --model medium
    mg_run "${mg_figs[3]}" mg-adamw --mode ddp --model small --optimizer adamw
    mg_run "${mg_figs[4]}" mg-view --mode ddp --model medium --grad-as-bucket-view
    mg_run "${mg_figs[5]}" mg-nooverlap --mode ddp --model medium --no-overlap
    mg_run "${mg_figs[6]}" mg-lean --mode dp --model medium --dp-impl lean
  fi
fi

# 8. Counters. The links child (~3 s) and two configurations (~4 s each): ~15 s. Every
# configuration must end ok: the sweep's parent must not initialise CUDA before it forks them.
if dc_step "sweep with links measured" 15 "sweep dp,ddp gpus=1"; then
  run "$bin" sweep --backend "$backend" --mode dp,ddp --gpus 1 --model small --steps 5 --warmup 2 \
    --config-timeout 60 --out "$res" --name sweep
  dps_figure "sweep dp,ddp gpus=1" $? sweep "$res/sweep" 2
fi
# dp fp32 run twice with --save-params: the parameters equal bit for bit (the bias gradients'
# reduction has a fixed order; cuBLAS is deterministic on one GPU), ~8 s. NVML's PCIe bytes in
# the sweep's devices.csv: NVML initialised in each configuration's process.
if dc_step "the same bits run to run, NVML in the sweep's processes" 10 \
    "params same bits" "nvml pcie in sweep"; then
  for k in 1 2; do
    dps "bits-$k" --mode dp --gpus 1 --model small --steps 5 --warmup 1 --save-params "$res/bits-$k.params"
  done
  dc_figures_from "params same bits" "$py" scripts/device_check_backend.py same-bits \
    "params same bits" "$res/bits-1.params" "$res/bits-2.params"
  dc_figures_from "nvml pcie in sweep" "$py" scripts/device_check_backend.py nvml-pcie \
    "nvml pcie in sweep" "$res/sweep" "$backend"
fi
# NVML's cumulative PCIe counters of GPU 0 (CUDA's device 0 in PCI order) before and after a
# links run of 64 MiB copies, 10 a path (0.7 GB each way, under a 32-bit counter's wrap): ~5 s.
if dc_step "NVML's PCIe bytes against a links run" 8 "nvml bytes on links"; then
  if [ "$host" = 1 ]; then
    figure "nvml bytes on links" "not a GPU figure: the host backend has no NVML" \
      "NVML RX >= h2d bytes and TX >= d2h bytes copied" SKIP
  else
    "$py" scripts/device_check_backend.py nvml-read "$res/nvml-before.txt"
    CUDA_DEVICE_ORDER=PCI_BUS_ID run "$bin" links --backend "$backend" --gpus 1 --sizes 64M --steps 10 \
      --out "$res" --name nvml-links
    rc=$?
    "$py" scripts/device_check_backend.py nvml-read "$res/nvml-after.txt"
    dc_was_skipped "nvml bytes on links" "$rc" || dc_figures_from "nvml bytes on links" "$py" \
      scripts/device_check_backend.py nvml-links "nvml bytes on links" "$res/nvml-links" 10 \
      "$res/nvml-before.txt" "$res/nvml-after.txt"
  fi
fi

# 9. Failure paths: rank 1 exits, or hangs under --timeout 10, at step 2: the run ends with its
# row (status error, timeout) and exit 1, no hang. ddp on 2 devices, or on one GPU the two
# ranks of step 4: ~5 s and ~15 s.
fault() { # FIG NAME STATUS MAX_SECONDS OPTIONS...
  local fig=$1 name=$2 status=$3 max=$4 t0 rc
  shift 4
  t0=$(dc_now)
  if [ "$host" = 0 ] && [ "$ngpu" -lt 2 ]; then
    two_timeout=$((max + 5)) two_ranks "$name" --model small --steps 6 --warmup 1 "$@"
    rc=${two_rc[0]}
    [ "${two_rc[1]}" -eq 124 ] && rc=124 # the other rank hung on
  else
    dps "$name" --mode ddp --gpus 2 --model small --steps 6 --warmup 1 "$@"
    rc=$?
  fi
  dc_was_skipped "$fig" "$rc" || dc_figures_from "$fig" "${cmp[@]}" fault "$fig" "$res/$name" \
    "$status" 1 "$rc" $(($(dc_now) - t0)) "$max"
}
if dc_step "a rank that exits" 10 "fault exit rank 1"; then
  fault "fault exit rank 1" fault-exit error 60 --inject-fault 1:2:exit --timeout 30
fi
if dc_step "a rank that hangs, --timeout 10" 30 "fault hang rank 1 --timeout"; then
  fault "fault hang rank 1 --timeout" fault-hang timeout 60 --inject-fault 1:2:hang --timeout 10
fi

# 10. What the ranges and the sampler cost, links against PyTorch's copies, Nsight Compute.
# 6 runs of ~3 s, interleaved (default, --no-nvtx, --no-nvml, twice) so
# that drift reaches all three alike.
if dc_step "what NVTX ranges and the NVML sampler cost" 20 "no-nvtx cost" "no-nvml cost"; then
  if [ "$host" = 1 ]; then
    skip_all "not a GPU figure: the host backend has no bf16, NVTX or NVML" "no-nvtx cost" "no-nvml cost"
  else
    cost_args=(run --backend "$backend" --mode dp --gpus 1 --precision bf16 --model resnet50-mlp --steps 50 --warmup 5
          --out "$res")
    rc=0
    for r in 1 2; do
      run "$bin" "${cost_args[@]}" --name "cost-default-$r" || rc=$?
      run "$bin" "${cost_args[@]}" --no-nvtx --name "cost-nonvtx-$r" || rc=$?
      run "$bin" "${cost_args[@]}" --no-nvml --name "cost-nonvml-$r" || rc=$?
    done
    if ! dc_was_skipped "no-nvtx cost" "$rc"; then
      dps_figure "no-nvtx cost" 0 cost 0.01 "$res/cost-default-1" "$res/cost-default-2" -- \
        "$res/cost-nonvtx-1" "$res/cost-nonvtx-2"
    fi
    if ! dc_was_skipped "no-nvml cost" "$rc"; then
      dps_figure "no-nvml cost" 0 cost 0.01 "$res/cost-default-1" "$res/cost-default-2" -- \
        "$res/cost-nonvml-1" "$res/cost-nonvml-2"
    fi
  fi
fi

# dpscale links ~3 s, PyTorch's copies ~8 s (its start included).
if dc_step "links against PyTorch's copies" 12 "${links_figs[@]}"; then
  if [ "$host" = 1 ]; then
    skip_all "not a GPU figure: PyTorch's copies need CUDA" "${links_figs[@]}"
  else
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
fi

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

