#!/usr/bin/env bash
# scripts/setup.sh's output, against stand-ins for apt-get and meson on a PATH
# that lacks the compilers and tools (so that setup.sh takes its install
# path): a step that fails prints its name, the end of its output and where
# the whole log is, and exits non-zero; a run that succeeds prints at most 15
# lines, keeps apt's and meson's output in DIR/setup.log, and a second run one
# line. Nothing is installed and the real build/ is not touched: the build
# folder and $TMPDIR are scratch folders.
#   tests/test_setup.sh install_fails|configure_fails|succeeds
set -u
cases="install_fails configure_fails succeeds"
# --list: this file's meson tests, for tests/meson.build (the format of tests/listing.py)
if [ "${1:-}" = --list ]; then
  for c in $cases; do printf 'setup %s\tscripts,nosan\t60\ttrue\t0\t%s\n' "${c//_/ }" "$c"; done
  exit 0
fi
case_=${1:?usage: test_setup.sh install_fails|configure_fails|succeeds}
here=$(cd "$(dirname "$0")" && pwd)
setup="$here/../scripts/setup.sh"
bash_=$(command -v bash)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/bin
build=$tmp/build
mkdir -p "$bin" "$tmp/tmpdir"

fail() {
  echo "FAIL test_setup.sh $case_: $*" >&2
  [ -f "$tmp/out" ] && { echo "--- setup.sh printed:" >&2; cat "$tmp/out" >&2; }
  exit 1
}

# The PATH setup.sh runs with: the few tools it uses, no compiler, ninja,
# pkg-config or git (so it finds them missing), and the stand-ins below.
for t in dirname id mktemp wc tail sed date mv env cat rm; do
  p=$(command -v "$t") || fail "no $t on this machine's PATH"
  ln -s "$p" "$bin/$t"
done
# sudo: for a run that is not root; runs its command as it is
printf '#!%s\nexec "$@"\n' "$bash_" >"$bin/sudo"
# apt-get: hundreds of lines of output; STANDIN_FAIL=apt-get ends its install with an error
cat >"$bin/apt-get" <<EOF
#!$bash_
PATH=$PATH
echo "\$*" >>"$tmp/apt-get.calls"
if [ "\$1" = update ]; then
  for i in \$(seq 40); do echo "Get:\$i http://deb.debian.org/debian bookworm InRelease"; done
  exit 0
fi
for i in \$(seq 300); do echo "Unpacking standin-\$i (1.0) ..."; echo "Setting up standin-\$i (1.0) ..."; done
if [ "\${STANDIN_FAIL:-}" = apt-get ]; then
  echo "E: Unable to locate package standin-missing"
  exit 100
fi
EOF
# meson: setup writes DIR/build.ninja after 80 lines; STANDIN_FAIL=meson fails instead
cat >"$bin/meson" <<EOF
#!$bash_
PATH=$PATH
echo "\$*" >>"$tmp/meson.calls"
for i in \$(seq 80); do echo "Program standin-\$i found: YES"; done
if [ "\${STANDIN_FAIL:-}" = meson ]; then
  echo "ERROR: Dependency \"standin\" not found"
  exit 1
fi
[ "\$1" = setup ] && mkdir -p "\$2" && echo "# standin" >"\$2/build.ninja"
exit 0
EOF
chmod +x "$bin/sudo" "$bin/apt-get" "$bin/meson"

# run_setup [VAR=VALUE...]: setup.sh on the scratch build folder, its output in $tmp/out;
# returns its exit status
run_setup() {
  env -u DPSCALE_WITH_TORCH PATH="$bin" TMPDIR="$tmp/tmpdir" "$@" \
    "$bash_" "$setup" "$build" >"$tmp/out" 2>&1
}

# A failed step: non-zero, the step named, the stand-in's last line (not its first) and
# the log's path printed, the whole output in that log. $1: the step's words, $2: the
# stand-in's last line, $3: a line of its output that is no longer on the screen.
expect_failure() {
  local rc=$1 step=$2 last=$3 early=$4 log
  [ "$rc" -ne 0 ] || fail "setup.sh exited 0 although a step failed"
  grep -q "^setup: FAILED while $step" "$tmp/out" || fail "no line naming the step '$step'"
  grep -qF "$last" "$tmp/out" || fail "the stand-in's last line '$last' is not printed"
  grep -qF "$early" "$tmp/out" && fail "the step's whole output is printed, not its end ('$early')"
  [ "$(wc -l <"$tmp/out")" -le 30 ] || fail "more than 30 lines for a failed step"
  log=$(sed -n 's/.*(all of the output: \(.*\))$/\1/p' "$tmp/out")
  [ -n "$log" ] || fail "the log's path is not printed"
  [ -f "$log" ] || fail "the log $log named in the message is not there"
  grep -qF "$early" "$log" || fail "the log $log lacks the step's early output"
  grep -qF "$last" "$log" || fail "the log $log lacks the step's last line"
}

case_install_fails() {
  run_setup STANDIN_FAIL=apt-get
  expect_failure $? "installing .*gcc" "E: Unable to locate package standin-missing" \
    "Unpacking standin-1 (1.0)"
  grep -q '^install .*\bgcc\b.*\bninja-build\b' "$tmp/apt-get.calls" \
    || fail "apt-get install was not asked for gcc and ninja-build: $(cat "$tmp/apt-get.calls")"
  [ ! -e "$tmp/meson.calls" ] || fail "meson ran after the install failed"
  ls "$tmp/tmpdir"/dpscale-setup.*.log >/dev/null 2>&1 \
    || fail "no log under \$TMPDIR although $build does not exist yet"
}

case_configure_fails() {
  run_setup STANDIN_FAIL=meson
  expect_failure $? "configuring $build/" "ERROR: Dependency \"standin\" not found" \
    "Program standin-1 found"
  [ ! -e "$build/build.ninja" ] || fail "$build/build.ninja written although meson failed"
}

case_succeeds() {
  run_setup || fail "setup.sh exited $? with stand-ins that succeed"
  local n
  n=$(wc -l <"$tmp/out")
  [ "$n" -le 15 ] || fail "$n lines printed, not at most 15"
  grep -q '^setup: installing .*gcc' "$tmp/out" || fail "no line saying what is installed"
  grep -qx "setup: configured $build/ (log: $build/setup.log; next: ninja -C $build)" "$tmp/out" \
    || fail "no line 'setup: configured $build/ (log: $build/setup.log; ...)'"
  grep -Eq 'Unpacking|Setting up|Program standin' "$tmp/out" && fail "apt's or meson's output printed"
  grep -q 'Setting up standin-300' "$build/setup.log" || fail "$build/setup.log lacks apt-get's output"
  grep -q 'Program standin-80 found' "$build/setup.log" || fail "$build/setup.log lacks meson's output"
  [ -z "$(ls -A "$tmp/tmpdir")" ] || fail "a log left under \$TMPDIR: $(ls "$tmp/tmpdir")"
  grep -q '^setup ' "$tmp/meson.calls" || fail "meson setup was not called"
  # again: the folder is configured and left as it is
  run_setup || fail "setup.sh exited $? on the second run"
  tail -n 1 "$tmp/out" | grep -qx "setup: $build/ is configured (run: ninja -C $build)" \
    || fail "the second run's last line does not say $build/ is configured"
  [ "$(grep -c '^setup ' "$tmp/meson.calls")" -eq 1 ] || fail "the second run ran meson setup again"
}

case " $cases " in
  *" $case_ "*) "case_$case_" ;;
  *) fail "unknown case '$case_': expected install_fails, configure_fails or succeeds" ;;
esac
echo "ok $case_"
