#!/usr/bin/env bash
# Did a change make dpscale slower? Runs a suite with the old and the new
# binary interleaved (old, new, old, new, ...) so that both see the same
# machine drift, then compares them with scripts/compare.py (the old runs
# pooled as the baseline, their spread as the drift).
#   scripts/ab.sh OLD_DPSCALE NEW_DPSCALE [ROUNDS] [SUITE] [compare.py options...]
#   (default: 3 rounds of bench/ci.suite; results in results/ab-<date>/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: scripts/ab.sh OLD_DPSCALE NEW_DPSCALE [ROUNDS] [SUITE] [compare.py options...]" >&2
  exit 2
fi
old=$1 new=$2
rounds=${3:-3}
suite=${4:-$root/bench/ci.suite}
[ $# -gt 4 ] && shift 4 || shift $#
for b in "$old" "$new"; do
  [ -x "$b" ] || { echo "ab.sh: $b is not an executable dpscale" >&2; exit 2; }
done
case "$rounds" in ''|*[!0-9]*|0) echo "ab.sh: ROUNDS must be a positive integer" >&2; exit 2 ;; esac
out="$root/results/ab-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/old" "$out/new"
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    bin=$old
    [ $side = new ] && bin=$new
    echo "ab: round $r of $rounds, $side"
    "$bin" sweep "$suite" --no-links --out "$out/$side" --name "run-$r" >/dev/null
  done
done
/usr/bin/python3 "$root/scripts/compare.py" "$out/old" "$out/new" \
  --markdown "$out/ab.md" --json "$out/ab.json" "$@"
