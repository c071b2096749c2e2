# shellcheck shell=bash
# The Python the shell scripts run their Python scripts under, sourced by them.
#   dps_python MODULE...  prints the first python3 on PATH that has every
#   MODULE (a venv's, conda's, a container's), else /usr/bin/python3 where
#   it has them (Debian's, what scripts/setup.sh installs into); exit 1 and
#   the first python3 found when none has them, so that the script run
#   under it says what is missing.
dps_python() {
  local c first=
  local -a found
  mapfile -t found < <(type -ap python3 2>/dev/null)
  found+=(/usr/bin/python3)
  for c in "${found[@]}"; do
    [ -x "$c" ] || continue
    [ -n "$first" ] || first=$c
    if "$c" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))' "$@" 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  echo "${first:-python3}"
  return 1
}
