#!/usr/bin/env bash
# Did a change make dpscale slower? The old and the new binary run a suite
# interleaved (old, new; new, old; ...) so that both see the same machine
# drift, compared as paired rounds: the gate, scripts/regress.py NEW
# --base-binary OLD --rounds ROUNDS, which writes
# results/regress-<date>-<time>-<host>/{base,head}/run-NNN/ and its report.
# Exit as compare.py's: 0 also where the rounds left configurations
# undecided (the gate's 3), 1 a regression, 2 bad input.
#   scripts/ab.sh OLD_DPSCALE NEW_DPSCALE [ROUNDS] [SUITE] [compare.py options...]
#   (default: 6 rounds of bench/ci.suite)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  echo "usage: scripts/ab.sh OLD_DPSCALE NEW_DPSCALE [ROUNDS] [SUITE] [compare.py options...]" >&2
  exit 2
fi
old=$1 new=$2
rounds=${3:-6}
suite=${4:-$root/bench/ci.suite}
[ $# -gt 4 ] && shift 4 || shift $#
# shellcheck source-path=SCRIPTDIR source=python.sh
. "$root/scripts/python.sh"
rc=0
# shellcheck disable=SC2119 # no module: the first python3
"$(dps_python)" "$root/scripts/regress.py" "$new" --base-binary "$old" --rounds "$rounds" \
  --suite "$suite" "$@" || rc=$?
[ "$rc" -eq 3 ] && rc=0
exit "$rc"
