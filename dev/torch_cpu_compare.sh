#!/usr/bin/env bash
# dpscale's host backend against PyTorch on the CPU, same model, data,
# initialisation and optimizer (the PyTorch reference's, dpstools.torch_model), one device:
# interleaved rounds (the order rotates every round) of
#   dpscale    dpscale run --backend host --gpus 1 --gemm-ref (one thread)
#   torch-1t   PyTorch with torch.set_num_threads(1) and OPENBLAS_NUM_THREADS=1
#              (its fp32 GEMMs go through OpenBLAS, whose pool is separate)
#   torch-def  PyTorch as it starts on this machine, for context (its thread
#              counts are printed: OpenBLAS takes every core by default)
# then the median step time of each side by side, dpscale / torch-1t, and
# dpscale's model TFLOP/s against its GEMM reference on the same shapes.
#   dev/torch_cpu_compare.sh [PRESET] [ROUNDS] [STEPS]   (default: medium 5 10)
#   DPSCALE=path/to/dpscale (default build/src/dpscale); results/torch-cpu-<date>/
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
preset=${1:-medium}
rounds=${2:-5}
steps=${3:-10}
warmup=3
dpscale=${DPSCALE:-$root/build/src/dpscale}
for v in "$rounds" "$steps"; do
  case "$v" in ''|*[!0-9]*|0) echo "torch_cpu_compare.sh: ROUNDS and STEPS must be positive integers" >&2; exit 2 ;; esac
done
[ -x "$dpscale" ] || { echo "torch_cpu_compare.sh: $dpscale is not built (ninja -C build)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "torch_cpu_compare.sh: PyTorch is not installed (apt-get install python3-torch)" >&2; exit 2; }

out="$root/results/torch-cpu-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"

# One PyTorch run on the CPU: prints "step_ms loss_first loss_last threads".
torch_step() {
  PYTHONPATH="$root/scripts" /usr/bin/python3 - "$dpscale" "$preset" "$steps" "$warmup" "$1" <<'PY'
import ctypes, sys, time
from dpstools import torch_model as ref
from dpstools.stats import median
import torch

dpscale, preset, steps, warmup, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if threads != "default":
    torch.set_num_threads(int(threads))
table = ref.presets(dpscale)
shape, batch = table[preset][:4], table[preset][4]
L, D, T, C = shape
model = ref.build_model(torch, shape, ref.init_params(shape, 1234))
class Args: optimizer, lr = "sgd", 0.0
opt = ref.optimizer(torch, Args, model.parameters())
loss_fn = torch.nn.CrossEntropyLoss()
times, losses = [], []
for step in range(warmup + steps):
    x, y = ref.make_batch(shape, 1234, step, batch * T)
    xb, yb = torch.from_numpy(x), torch.from_numpy(y)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    ms = (time.perf_counter() - t0) * 1e3
    losses.append(float(loss))
    if step >= warmup:
        times.append(ms)
blas = ""
for line in open("/proc/self/maps"):
    if "libopenblas" in line:
        lib = ctypes.CDLL(line.split()[-1])
        blas = f"+openblas{lib.openblas_get_num_threads()}"
        break
print(f"{median(times):.3f} {losses[0]:.6f} {losses[-1]:.6f} "
      f"torch{torch.get_num_threads()}{blas}")
PY
}

dpscale_step() {
  "$dpscale" run --backend host --model "$preset" --gpus 1 --steps "$steps" --warmup "$warmup" \
    --gemm-ref --out "$out/dpscale" --name "round-$1" >/dev/null
  /usr/bin/python3 - "$out/dpscale/round-$1/runs.csv" <<'PY'
import csv, sys
r = next(csv.DictReader(open(sys.argv[1])))
print(r["step_ms_median"], r["loss_first"], r["loss_last"], r["model_tflops"], r["gemm_ref_tflops"])
PY
}

sides=(dpscale torch-1t torch-def)
echo "loadavg before: $(cat /proc/loadavg)" | tee "$out/load.txt"
echo "round side step_ms loss_first loss_last extra" > "$out/rounds.txt"
for r in $(seq 1 "$rounds"); do
  for i in 0 1 2; do
    side=${sides[$(((i + r) % 3))]}
    case $side in
      dpscale) line=$(dpscale_step "$r") ;;
      torch-1t) line=$(OPENBLAS_NUM_THREADS=1 torch_step 1) ;;
      torch-def) line=$(torch_step default) ;;
    esac
    echo "$r $side $line" | tee -a "$out/rounds.txt"
  done
done
echo "loadavg after: $(cat /proc/loadavg)" | tee -a "$out/load.txt"

PYTHONPATH="$root/scripts" /usr/bin/python3 - "$out/rounds.txt" "$preset" \
  "$("$dpscale" info --backend host | sed -n 's/^ *host BLAS *//p')" <<'PY'
import collections, sys
from dpstools.stats import median
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
by = collections.defaultdict(list)
for r in rows:
    by[r[1]].append(r)
med = {s: median(float(r[2]) for r in rs) for s, rs in by.items()}
print(f"\n{sys.argv[2]}, one device, {len(by['dpscale'])} rounds, median of the rounds' median step")
print(f"  {'side':20} {'threads':18} {'step ms':>9}")
print(f"  {'dpscale host':20} {'1 per device':18} {med['dpscale']:9.2f}   {sys.argv[3]}")
for s, label in (("torch-1t", "PyTorch one thread"), ("torch-def", "PyTorch default")):
    print(f"  {label:20} {by[s][0][5]:18} {med[s]:9.2f}")
print(f"  dpscale / PyTorch one thread: {med['dpscale'] / med['torch-1t']:.3f}, "
      f"dpscale / PyTorch default: {med['dpscale'] / med['torch-def']:.3f}")
tf = median(float(r[5]) for r in by["dpscale"])
ref = median(float(r[6]) for r in by["dpscale"])
print(f"  dpscale model TFLOP/s {tf:.4f}, its GEMMs alone (--gemm-ref) {ref:.4f}: {tf / ref:.0%}")
print(f"  loss first/last: dpscale {by['dpscale'][0][3]} {by['dpscale'][0][4]}, "
      f"PyTorch {by['torch-1t'][0][3]} {by['torch-1t'][0][4]}")
PY
echo "rounds: $out/rounds.txt"
