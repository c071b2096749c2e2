#!/usr/bin/env bash
# One configuration under Nsight Systems: `nsys profile` with the capture
# range set by dpscale's --profile-steps (default 5:9, steady-state steps
# only), then `nsys stats` (NVTX ranges, GPU kernels) as CSV, all beside the
# results in results/profile-<date>-<host>/. ddp's ranks are forked without
# exec, which nsys traces only with --trace-fork-before-exec=true.
#   scripts/profile.sh [dpscale run options]
#   e.g. scripts/profile.sh --mode ddp --gpus 4 --model resnet50 --precision bf16
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dpscale=${DPSCALE:-$root/build/src/dpscale}
if ! command -v nsys >/dev/null 2>&1; then
  echo "profile.sh: nsys (NVIDIA Nsight Systems) is not installed or not on PATH; install" \
       "Nsight Systems (it comes with the CUDA toolkit's nsight-systems package) and retry" >&2
  exit 2
fi
[ -x "$dpscale" ] || { echo "profile.sh: no $dpscale: run scripts/setup.sh && ninja -C build" >&2; exit 2; }
args=("$@")
case " ${args[*]:-} " in
  *" --profile-steps"*) ;;
  *) args+=(--profile-steps 5:9) ;;
esac
name="profile-$(date +%Y%m%d-%H%M%S)-$(hostname -s 2>/dev/null || hostname)"
out="$root/results/$name"
mkdir -p "$out"
nsys profile -t cuda,nvtx,osrt,cublas --capture-range=cudaProfilerApi --capture-range-end=stop \
  --trace-fork-before-exec=true --force-overwrite true -o "$out/profile" \
  "$dpscale" run "${args[@]}" --out "$root/results" --name "$name"
nsys stats --report nvtx_sum,cuda_gpu_kern_sum --format csv --force-export true \
  --output "$out/stats" "$out/profile.nsys-rep"
echo "profile.sh: report $out/profile.nsys-rep, tables $out/stats_*.csv, results in $out"
