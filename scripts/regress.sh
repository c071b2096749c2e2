#!/usr/bin/env bash
# The CI regression job (`ninja -C build regress`): runs bench/ci.suite,
# then compares it with the baseline of this machine in
# bench/baselines/<backend>-<device>/ (scripts/compare.py). Without a
# baseline it says how to make one; --update-baseline adds this run to it
# (the newest three runs are kept: their spread is the machine's drift).
#   scripts/regress.sh DPSCALE [--update-baseline] [compare.py options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dpscale=$1
shift
update=0
if [ "${1:-}" = "--update-baseline" ]; then
  update=1
  shift
fi
name="regress-$(date +%Y%m%d-%H%M%S)-$(hostname -s 2>/dev/null || hostname)"
out="$root/results/$name"
"$dpscale" sweep "$root/bench/ci.suite" --out "$root/results" --name "$name"
key=$(/usr/bin/python3 - "$out/meta.json" <<'PY'
import json, re, sys
m = json.load(open(sys.argv[1]))
dev = (m.get("devices") or [{}])[0].get("name", "unknown")
dev = dev.replace("emulated device on ", "")
print(re.sub(r"[^a-z0-9]+", "-", f"{m.get('backend', 'unknown')}-{dev}".lower()).strip("-"))
PY
)
base="$root/bench/baselines/$key"
if [ $update -eq 1 ]; then
  run="$base/run-$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$run"
  cp "$out"/runs.csv "$out"/steps.csv "$out"/devices.csv "$out"/meta.json "$run"/
  ls -d "$base"/run-* | sort | head -n -3 | xargs -r rm -rf
  echo "regress: $(ls -d "$base"/run-* | wc -l) baseline run(s) for $key in bench/baselines/$key (commit them)"
  exit 0
fi
if ! ls "$base"/run-*/runs.csv >/dev/null 2>&1; then
  echo "regress: no baseline for this machine ($key) in bench/baselines/."
  echo "regress: make one from a run you trust with: scripts/regress.sh $dpscale --update-baseline"
  echo "regress: (results of this run: results/$name)"
  exit 0
fi
status=0
/usr/bin/python3 "$root/scripts/compare.py" "$base" "$out" \
  --markdown "$out/regression.md" --junit "$out/regression.xml" --json "$out/regression.json" \
  --plot "$out/regression.png" "$@" || status=$?
echo "regress: report in results/$name/regression.{md,xml,json,png}"
exit $status
