#!/usr/bin/env bash
# The CI regression job (`ninja -C build regress`): the base commit built
# beside the build and run interleaved with the head until every
# configuration is decided or the budget is spent; --stored compares with
# bench/baselines/<machine>/ instead. scripts/regress.py says how.
#   scripts/regress.sh DPSCALE [--base REF] [--budget-min 5] [--stored] ...
# shellcheck source-path=SCRIPTDIR source=python.sh
. "$(dirname "$0")/python.sh"
# shellcheck disable=SC2119 # no module: the first python3
exec "$(dps_python)" "$(dirname "$0")/regress.py" "$@"
