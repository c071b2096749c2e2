#!/usr/bin/env bash
# The host collectives of `dpscale comm-bench` (the shared-memory ring) beside
# Open MPI's MPI_Allreduce, MPI_Reduce_scatter_block and MPI_Allgather, on
# the same ranks and sizes, timed the same way (scripts/mpi_collectives.c:
# a barrier, one collective, the slowest rank; the median of the
# iterations), and memcpy's bandwidth at 64 MiB as the yardstick. Sizes are
# the whole buffer, as nccl-tests counts them. The machine is shared, so
# both sides run ROUNDS times, interleaved, and each keeps its best median.
# Installs nothing: it needs mpicc and mpirun (Debian: openmpi-bin
# libopenmpi-dev) and a built dpscale.
#   scripts/allreduce_vs_mpi.sh [-n RANKS] [--sizes LIST] [--iters N]
#                               [--warmup N] [--rounds N] [--build DIR]
#   (default: 2 ranks, 1K,4K,...,64M by factors of 4, 50 iterations after
#   5 warm-up ones, 3 rounds, build/)
# Columns: mpi_us and dpscale_us, the medians; speedup = mpi_us /
# dpscale_us; pct_memcpy = dpscale's busbw (nccl-tests' bus bandwidth) as a
# percentage of memcpy's bandwidth. Exit 2: bad input or a missing tool.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ranks=2 iters=50 warmup=5 rounds=3 build=$root/build
sizes=1K,4K,16K,64K,256K,1M,4M,16M,64M
usage() { sed -n '/^#   scripts/,/^#   5 warm/p' "$0" | sed 's/^# //' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -n|--ranks) ranks=${2:?}; shift 2 ;;
    --sizes) sizes=${2:?}; shift 2 ;;
    --iters) iters=${2:?}; shift 2 ;;
    --warmup) warmup=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --build) build=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
dpscale=$build/src/dpscale
for tool in mpicc mpirun; do
  command -v $tool >/dev/null 2>&1 || {
    echo "allreduce_vs_mpi.sh: no $tool; install Open MPI: apt-get install openmpi-bin libopenmpi-dev" >&2
    exit 2; }
done
[ -x "$dpscale" ] || { echo "allreduce_vs_mpi.sh: no $dpscale: run scripts/setup.sh && ninja -C $build" >&2; exit 2; }

# Bytes of each size, rounded down to whole chunks of floats for RANKS.
bytes=()
for s in ${sizes//,/ }; do
  case $s in
    *K) b=$(( ${s%K} << 10 )) ;; *M) b=$(( ${s%M} << 20 )) ;; *G) b=$(( ${s%G} << 30 )) ;;
    *) b=$s ;;
  esac
  chunk=$(( b / (4 * ranks) ))
  bytes+=($(( chunk * 4 * ranks )))
done
sizes_b=$(IFS=,; echo "${bytes[*]}")

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc -O2 -o "$out/mpi_collectives" "$root/scripts/mpi_collectives.c"
mpi=(mpirun --allow-run-as-root --oversubscribe)
help=$("$dpscale" comm-bench --help 2>&1 || true)
takes() { grep -E -- "^ +$1 .*comm-bench" <<<"$help" >/dev/null; }
cb=(--gpus "$ranks" --sizes "$sizes_b" --warmup "$warmup" --steps "$iters")
takes --op && cb+=(--op "all-reduce,reduce-scatter,all-gather") # older builds: all-reduce alone
takes --comm && cb+=(--comm shm)

"${mpi[@]}" -np 1 "$out/mpi_collectives" memcpy "$warmup" "$iters" $((64 << 20)) > "$out/memcpy.csv"
for r in $(seq "$rounds"); do
  for op in all-reduce reduce-scatter all-gather; do
    "${mpi[@]}" -np "$ranks" "$out/mpi_collectives" "$op" "$warmup" "$iters" "${bytes[@]}" >> "$out/mpi.csv"
  done
  "$dpscale" comm-bench "${cb[@]}" --out "$out" --name "dps-$r" >/dev/null
done

/usr/bin/python3 - "$out" "$ranks" "$(mpirun --version | head -1)" <<'PY'
import csv, glob, math, os, sys
out, nranks, version = sys.argv[1], int(sys.argv[2]), sys.argv[3]
best = {}                                   # (side, op, bytes) -> best median (us)
def keep(side, op, nbytes, us):
    key = (side, op, nbytes)
    best[key] = min(best.get(key, math.inf), us)
mpi_ops = []
for line in open(os.path.join(out, "mpi.csv")):
    op, n, b, us = line.strip().split(",")[:4]
    keep("mpi", op, int(b), float(us))
    if op not in mpi_ops: mpi_ops.append(op)
for path in glob.glob(os.path.join(out, "dps-*", "allreduce.csv")):
    for row in csv.DictReader(open(path)):
        if int(row["nranks"]) == nranks:
            keep("dpscale", row.get("op", "all-reduce"), int(row["bytes"]), float(row["time_us"]))
memcpy_b, memcpy_us = [(int(r[2]), float(r[3])) for r in csv.reader(open(os.path.join(out, "memcpy.csv")))][0]
memcpy_gbps = memcpy_b / memcpy_us / 1e3
bus = {"all-reduce": 2 * (nranks - 1) / nranks}
print(f"# {version} against dpscale comm-bench (shm), {nranks} ranks; memcpy {memcpy_b >> 20} MiB: "
      f"{memcpy_gbps:.2f} GB/s; best of the rounds' medians")
print(f"# {'op':<14} {'ranks':>5} {'bytes':>10} {'mpi_us':>10} {'dpscale_us':>10} {'speedup':>8} {'pct_memcpy':>10}")
for op in mpi_ops:
    for (side, o, b), mpi_us in sorted(best.items(), key=lambda kv: kv[0][2]):
        if side != "mpi" or o != op: continue
        dps = best.get(("dpscale", op, b))
        if dps is None:
            print(f"  {op:<14} {nranks:>5} {b:>10} {mpi_us:>10.1f} {'N/A':>10} {'N/A':>8} {'N/A':>10}")
            continue
        busbw = b / dps / 1e3 * bus.get(op, (nranks - 1) / nranks)
        print(f"  {op:<14} {nranks:>5} {b:>10} {mpi_us:>10.1f} {dps:>10.1f} {mpi_us / dps:>7.2f}x "
              f"{100 * busbw / memcpy_gbps:>9.0f}%")
PY
