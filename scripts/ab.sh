#!/usr/bin/env bash
# Did a change make dpscale slower? Runs a suite with the old and the new
# binary interleaved (old, new; new, old; ...) so that both see the same
# machine drift, then compares them with scripts/compare.py as paired
# rounds (the shift's interval; 6 rounds at least give one).
#   scripts/ab.sh OLD_DPSCALE NEW_DPSCALE [ROUNDS] [SUITE] [compare.py options...]
#   (default: 6 rounds of bench/ci.suite; results in results/ab-<date>/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: scripts/ab.sh OLD_DPSCALE NEW_DPSCALE [ROUNDS] [SUITE] [compare.py options...]" >&2
  exit 2
fi
old=$1 new=$2
rounds=${3:-6}
suite=${4:-$root/bench/ci.suite}
[ $# -gt 4 ] && shift 4 || shift $#
for b in "$old" "$new"; do
  [ -x "$b" ] || { echo "ab.sh: $b is not an executable dpscale" >&2; exit 2; }
done
case "$rounds" in ''|*[!0-9]*|0) echo "ab.sh: ROUNDS must be a positive integer" >&2; exit 2 ;; esac
out="$root/results/ab-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/old" "$out/new"
for r in $(seq 1 "$rounds"); do
  order="old new"
  [ $((r % 2)) -eq 0 ] && order="new old"
  for side in $order; do
    bin=$old
    [ $side = new ] && bin=$new
    echo "ab: round $r of $rounds, $side"
    "$bin" sweep "$suite" --no-links --out "$out/$side" --name "$(printf 'run-%03d' "$r")" >/dev/null
  done
done
/usr/bin/python3 "$root/scripts/compare.py" "$out/old" "$out/new" \
  --markdown "$out/ab.md" --json "$out/ab.json" "$@"
