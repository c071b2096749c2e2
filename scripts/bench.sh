#!/usr/bin/env bash
# The main job (`ninja -C build bench`): runs a suite into
# results/<date>-<host>/, draws its charts into plots/<same name>/, and
# points results/latest and plots/latest at them.
#   scripts/bench.sh DPSCALE [SUITE] [dpscale sweep options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=python.sh
. "$root/scripts/python.sh"
dpscale=$1
suite=${2:-$root/bench/default.suite}
[ $# -ge 2 ] && shift 2 || shift 1
name="$(date +%Y%m%d-%H%M%S)-$(hostname -s 2>/dev/null || hostname)"
status=0
# DPSCALE_CHARTS: the sweep's first line says where the charts will be
DPSCALE_CHARTS="plots/$name" "$dpscale" sweep "$suite" --out "$root/results" --name "$name" "$@" \
  || status=$?
if [ -s "$root/results/$name/runs.csv" ]; then
  py=$(dps_python matplotlib) || echo "bench: no python3 on PATH nor /usr/bin/python3 has matplotlib (scripts/setup.sh installs python3-matplotlib)" >&2
  echo "bench: drawing the charts with $py"
  "$py" "$root/scripts/plot.py" "$root/results/$name" --out "$root/plots/$name" || status=$?
  ln -sfn "$name" "$root/plots/latest"
  echo "bench: results in results/$name, charts in plots/$name (summary: plots/$name/summary.md)"
fi
exit $status
