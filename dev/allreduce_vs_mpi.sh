#!/usr/bin/env bash
# Host all-reduce of dpscale beside OpenMPI's MPI_Allreduce, timed the same
# way in the same run. OpenMPI is used only here: this script installs
# Debian's libopenmpi-dev/openmpi-bin when missing and builds
# dev/mpi_allreduce.c into the build folder.
#   dev/allreduce_vs_mpi.sh [BUILD_DIR] [RANKS...]   (default: build 2 4)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ $# -gt 0 ] && shift
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4)
sizes_h="1M,16M,64M"
sizes_b=(1048576 16777216 67108864)
warmup=3
iters=20

[ -x "$build/src/dpscale" ] || { echo "no $build/src/dpscale: run scripts/setup.sh && ninja -C $build" >&2; exit 2; }
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "installing OpenMPI (libopenmpi-dev openmpi-bin) for the comparison"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libopenmpi-dev openmpi-bin
fi
mpicc -O2 -o "$build/mpi_allreduce" dev/mpi_allreduce.c

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in "${ranks[@]}"; do
  "$build/src/dpscale" comm-bench --gpus "$n" --sizes "$sizes_h" --warmup $warmup --steps $iters \
    --out "$out" --name dps >/dev/null
  OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun --allow-run-as-root --oversubscribe -np "$n" \
    "$build/mpi_allreduce" $warmup $iters "${sizes_b[@]}" >> "$out/mpi.csv"
done
printf "%6s %10s %14s %14s %8s\n" ranks MiB "dpscale busbw" "OpenMPI busbw" ratio
/usr/bin/python3 - "$out/dps/allreduce.csv" "$out/mpi.csv" <<'PY'
import csv, sys
dps = {(int(r["nranks"]), int(r["bytes"])): float(r["busbw_gbps"]) for r in csv.DictReader(open(sys.argv[1]))}
for line in open(sys.argv[2]):
    n, b, _, _, busbw = line.strip().split(",")
    key = (int(n), int(b))
    mine = dps.get(key, float("nan"))
    print(f"{key[0]:6d} {key[1] / 2**20:10.0f} {mine:11.3f} GB/s {float(busbw):9.3f} GB/s {mine / float(busbw):7.1f}x")
PY
