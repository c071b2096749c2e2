#!/usr/bin/env bash
# Which GEMM library should the host backend use on this machine? Builds
# dev/host_gemm.c once per library (build-gemm-LIB/, -Dcuda=disabled
# -Dhost-gemm=LIB; a library that is not installed is skipped), runs them
# interleaved (the order rotates every round) on the shapes of each preset's
# training step, one thread each, and prints the median GFLOP/s of every
# shape per library, the step's mix last. Raw rows and the load average
# before and after: results/host-gemm-<date>/.
#   dev/host_gemm_bench.sh [ROUNDS] [PRESET...]   (default: 3 rounds, small medium)
#   HOST_GEMM_LIBS="dnnl openblas blis" picks the libraries.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
case "$rounds" in ''|*[!0-9]*|0) echo "host_gemm_bench.sh: ROUNDS must be a positive integer" >&2; exit 2 ;; esac
[ $# -gt 0 ] && shift
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(small medium)
read -r -a libs <<< "${HOST_GEMM_LIBS:-dnnl openblas blis}"

out="$root/results/host-gemm-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
built=()
for lib in "${libs[@]}"; do
  dir="$root/build-gemm-$lib"
  if [ ! -f "$dir/build.ninja" ] &&
     ! meson setup "$dir" "$root" -Dcuda=disabled -Dhost-gemm="$lib" >"$out/setup-$lib.log" 2>&1; then
    echo "host_gemm_bench.sh: $lib skipped: meson setup failed (see $out/setup-$lib.log)" >&2
    rm -rf "$dir"
    continue
  fi
  ninja -C "$dir" dev/host_gemm_bench >/dev/null
  built+=("$lib")
done
[ ${#built[@]} -gt 0 ] || { echo "host_gemm_bench.sh: no library could be built" >&2; exit 1; }

echo "loadavg before: $(cat /proc/loadavg)" | tee "$out/load.txt"
n=${#built[@]}
for r in $(seq 1 "$rounds"); do
  for preset in "${presets[@]}"; do
    for i in $(seq 0 $((n - 1))); do
      lib=${built[$(((i + r) % n))]}
      echo "round $r/$rounds: $preset, $lib" >&2
      "$root/build-gemm-$lib/dev/host_gemm_bench" "$preset" | tail -n +2 |
        sed "s/^/$lib,$r,/" >> "$out/rows.csv"
    done
  done
done
echo "loadavg after: $(cat /proc/loadavg)" | tee -a "$out/load.txt"

/usr/bin/python3 - "$out/rows.csv" "${built[@]}" <<'PY'
import collections, csv, statistics, sys
path, libs = sys.argv[1], sys.argv[2:]
wall, cpu, shapes, names = collections.defaultdict(list), collections.defaultdict(list), {}, {}
for row in csv.reader(open(path)):
    lib, _round, name, preset, shape, op, m, n, k, calls, _ms, gflops, cpu_gflops = row
    shapes.setdefault((preset, shape), (op, m, n, k, calls))
    names[lib] = name
    wall[(preset, shape, lib)].append(float(gflops))
    cpu[(preset, shape, lib)].append(float(cpu_gflops))
for lib in libs:
    print(f"{lib}: {names.get(lib, '?')}")
print("\nmedian GFLOP/s over the rounds, wall clock [thread CPU time]; "
      "x: calls per step; step: the step's GEMMs together (m n k: rows width classes)")
print(f"{'preset':7} {'shape':24} {'op':2} {'m':>5} {'n':>5} {'k':>5} {'x':>2}" +
      "".join(f" {lib:>16}" for lib in libs))
for (preset, shape), (op, m, n, k, calls) in shapes.items():
    cells = []
    for lib in libs:
        w, c = wall.get((preset, shape, lib)), cpu.get((preset, shape, lib))
        cells.append(f" {statistics.median(w):7.1f} [{statistics.median(c):6.1f}]" if w
                     else f" {'-':>16}")
    print(f"{preset:7} {shape:24} {op:2} {m:>5} {n:>5} {k:>5} {calls:>2}" + "".join(cells))
PY
echo "raw rows: $out/rows.csv"
