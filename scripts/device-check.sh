#!/usr/bin/env bash
# The GPU checks of dpscale, in a few minutes, on a machine with an NVIDIA
# GPU whose image has nvcc, meson, ninja and PyTorch but no package
# registry. Builds dpscale there (NCCL from the toolkit or from PyTorch's
# nvidia-nccl wheel), then runs: info; dp and ddp on one GPU with --check in
# fp32 and bf16; dp with two replicas on GPU 0; the largest preset in bf16
# with its GEMM rate; the same configurations in PyTorch
# (scripts/torch_reference.py); --no-trace and --no-nvml against default;
# dpscale links against PyTorch's copies; and compute-sanitizer on a short
# run where the machine supports it.
# Everything it prints and writes goes under OUTDIR.
#   scripts/device-check.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/device-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
exec > >(tee "$out/device-check.log") 2>&1
cd "$root"
res="$out/results"
mkdir -p "$res"
bin=build-gpu/src/dpscale
step() { echo; echo "== $*"; }
run() { echo "+ $*"; timeout "${T:-300}" "$@"; echo "exit $?"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
nvcc --version | tail -2
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1

step "NCCL"
nccl_opt=(-Dnccl=disabled)
if [ -f /usr/local/cuda/include/nccl.h ]; then
  nccl_opt=(-Dnccl=enabled)
else
  wheel=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0])' 2>/dev/null || true)
  if [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ]; then
    shim="$root/build-gpu-nccl"
    mkdir -p "$shim/lib"
    ln -sfn "$wheel/include" "$shim/include"
    so=$(ls "$wheel"/lib/libnccl.so* | head -1)
    ln -sfn "$so" "$shim/lib/libnccl.so"
    nccl_opt=(-Dnccl=enabled "-Dnccl_path=$shim")
    export LD_LIBRARY_PATH="$wheel/lib:${LD_LIBRARY_PATH:-}"
  fi
fi
echo "meson options for NCCL: ${nccl_opt[*]}"

step "build"
meson=(meson)
command -v meson >/dev/null || meson=(python3 -m mesonbuild.mesonmain)
rm -rf build-gpu
T=600 run "${meson[@]}" setup build-gpu -Dcuda=enabled -Dcuda-arch=90 "${nccl_opt[@]}" \
  || T=600 run "${meson[@]}" setup build-gpu -Dcuda=enabled -Dcuda-arch=90 -Dnccl=disabled
T=600 run ninja -C build-gpu
[ -x "$bin" ] || { echo "device-check: the build failed"; exit 1; }

step "info"
run "$bin" info
common=(--out "$res" --name dpscale)

step "correctness on one GPU (--check)"
for mode in dp ddp; do
  for prec in fp32 bf16; do
    run "$bin" run --backend cuda --mode "$mode" --precision "$prec" --model small --steps 10 --check "${common[@]}"
  done
done
run "$bin" run --backend cuda --mode dp --devices 0,0 --model small --steps 10 --check "${common[@]}"
run "$bin" run --backend cuda --mode dp --devices 0,0 --precision bf16 --model resnet50 --steps 5 --check "${common[@]}"

step "throughput: model TFLOP/s against the GEMMs alone, and NVTX cost"
for m in resnet50 gpt2 bert-large; do
  run "$bin" run --backend cuda --precision bf16 --model "$m" --steps 15 --warmup 3 --gemm-ref "${common[@]}"
done
run "$bin" run --backend cuda --precision bf16 --model bert-large --steps 15 --warmup 3 --no-trace --out "$res" --name dpscale-notrace
run "$bin" run --backend cuda --mode ddp --precision bf16 --model resnet50 --steps 15 "${common[@]}"

step "links: dpscale's copies against PyTorch's, timed the same way; NVML cost"
run "$bin" links --backend cuda --gpus 1 --sizes 256M --steps 10 --out "$res" --name links
python3 - <<'PY' 2>&1 | tee "$res/torch_copies.txt"
import statistics, torch
n = 256 << 20
h = torch.empty(n, dtype=torch.uint8).pin_memory()
d0 = torch.empty(n, dtype=torch.uint8, device="cuda")
d1 = torch.empty(n, dtype=torch.uint8, device="cuda")
def bw(dst, src):
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    t = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); dst.copy_(src, non_blocking=True); b.record(); b.synchronize()
        t.append(a.elapsed_time(b))
    return n / (statistics.median(t) * 1e-3) / 1e9
print(f"torch h2d {bw(d0, h):.2f} GB/s, d2h {bw(h, d0):.2f} GB/s, d2d {bw(d1, d0):.2f} GB/s")
PY
run "$bin" run --backend cuda --precision bf16 --model resnet50 --steps 20 --no-nvml --out "$res" --name dpscale-nonvml

step "PyTorch on the same configurations"
for cfg in "dp small fp32" "dp small bf16" "dp resnet50 bf16" "dp bert-large bf16" "ddp resnet50 bf16"; do
  set -- $cfg
  steps=10; [ "$2" = small ] || steps=15
  run python3 scripts/torch_reference.py --mode "$1" --model "$2" --precision "$3" --steps $steps \
    --warmup 3 --out "$res" --name torch --dpscale "$bin"
done

step "compute-sanitizer"
if command -v compute-sanitizer >/dev/null; then
  T=240 run compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" run --backend cuda --model tiny --steps 2 --warmup 1 --out "$res" --name sanitizer
else
  echo "compute-sanitizer not installed"
fi

step "summary"
python3 - "$res" <<'PY' | tee "$out/summary.txt"
import csv, os, sys
res = sys.argv[1]
def rows(name):
    p = os.path.join(res, name, "runs.csv")
    return list(csv.DictReader(open(p))) if os.path.exists(p) else []
mine, torch, nt = rows("dpscale"), rows("torch"), rows("dpscale-notrace")
print(f"{'config':42} {'status':7} {'check':6} {'diff':>9} {'step_ms':>9} {'TFLOP/s':>8} {'gemm':>8} {'ratio':>6} {'gpu0 MiB':>9}")
for r in mine:
    g = r.get("gemm_ref_tflops") or ""
    ratio = f"{float(r['model_tflops']) / float(g):.2f}" if g and r["model_tflops"] else "-"
    print(f"{r['config_id']:42} {r['status']:7} {r['check']:6} {r['check_max_rel_diff'] or '-':>9} "
          f"{r['step_ms_median'] or '-':>9} {r['model_tflops'] or '-':>8} {g or '-':>8} {ratio:>6} "
          f"{int(r['gpu0_alloc_peak_bytes'] or 0) / 2**20:9.0f}")
print()
print(f"{'config':42} {'dpscale ms':>11} {'torch ms':>9} {'ratio':>6} {'loss dps':>9} {'loss torch':>10}")
by = {r["config_id"].replace("-strong", ""): r for r in mine}
for t in torch:
    d = by.get(t["config_id"])
    if not d or not d["step_ms_median"]:
        continue
    print(f"{t['config_id']:42} {float(d['step_ms_median']):11.3f} {float(t['step_ms_median']):9.3f} "
          f"{float(d['step_ms_median']) / float(t['step_ms_median']):6.2f} {d['loss_last']:>9} {t['loss_last']:>10}")
for label, other in (("NVTX", nt), ("NVML sampler", rows("dpscale-nonvml"))):
    for n in other:
        d = by.get(n["config_id"])
        if d and d["step_ms_median"]:
            print(f"\n{label} cost on {n['config_id']}: with {d['step_ms_median']} ms, without "
                  f"{n['step_ms_median']} ms ({(float(d['step_ms_median']) / float(n['step_ms_median']) - 1) * 100:+.2f} %)")
links = os.path.join(res, "links", "links.csv")
if os.path.exists(links):
    for r in csv.DictReader(open(links)):
        print(f"dpscale {r['method']} {r['src']}->{r['dst']}: {r['bw_gbps'] or r['latency_us']} ({r['status']})")
tc = os.path.join(res, "torch_copies.txt")
if os.path.exists(tc):
    print(open(tc).read().strip())
PY
tar -czf "$out/results.tar.gz" -C "$out" results && rm -rf "$res"
echo "device-check: done; log, summary.txt and results.tar.gz in $out"
