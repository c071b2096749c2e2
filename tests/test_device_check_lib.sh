#!/usr/bin/env bash
# Tests of the GPU check's pieces that need no GPU: scripts/device-check-lib.sh
# (run's exit status, timeouts, the deadline, the summary written by the EXIT
# trap), scripts/device_check_summary.py on dpscale's own results files (host
# backend), scripts/device_check_compare.py on such folders beside altered
# copies (as PyTorch's would be) and device_check_backend.py's NVML figure on
# written counters, the arguments scripts/profile.sh gives nsys, and the
# scripts' syntax (bash -n, shellcheck when installed).
#   tests/test_device_check_lib.sh run|trap|summary|compare|mainjob|profile|syntax DPSCALE
set -u
cases="run trap summary compare mainjob profile syntax"
# --list: this file's meson tests, for tests/meson.build (the format of tests/listing.py)
if [ "${1:-}" = --list ]; then
  # hang guards: summary and compare run dpscale a dozen times (CI: under the sanitizers)
  for c in $cases; do
    case $c in summary|compare) t=600 ;; *) t=300 ;; esac
    printf 'device-check %s\tscripts\t%s\ttrue\t0\t%s\t@dpscale@\n' "$c" "$t" "$c"
  done
  exit 0
fi
case_=${1:?usage: test_device_check_lib.sh run|trap|summary|compare|mainjob|profile|syntax DPSCALE}
dpscale=${2:?usage: test_device_check_lib.sh CASE DPSCALE}
here=$(cd "$(dirname "$0")" && pwd)
scripts="$here/../scripts"
lib="$scripts/device-check-lib.sh"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL test_device_check_lib.sh $case_: $*" >&2
  exit 1
}

# expect DESCRIPTION COMMAND...: the command must succeed.
expect() {
  local what=$1
  shift
  "$@" || fail "$what"
}

# The figure line NAME of a summary.tsv, or nothing.
fig() { awk -F '\t' -v n="$2" '$1 == n' "$1"; }

case_run() {
  (
    # shellcheck source-path=SCRIPTDIR source=../scripts/device-check-lib.sh
    . "$lib"
    DC_BUDGET=60 DC_RESERVE=0 DC_MIN_RUN=2
    dc_init "$tmp/out" >/dev/null
    trap - EXIT
    # the library's clock, set by the test: the deadline's arithmetic does not race the machine
    now=1000
    DC_START=$now
    dc_now() { echo "$now"; }
    run false >/dev/null && fail "run false returned 0"
    run true >/dev/null || fail "run true returned non-zero"
    run sh -c 'exit 7' >/dev/null
    [ $? -eq 7 ] || fail "run did not return the command's own exit status 7"
    run false >/dev/null || run touch "$tmp/fallback" >/dev/null
    [ -f "$tmp/fallback" ] || fail "run A || run B: B did not run after A failed"
    run true >/dev/null || run touch "$tmp/nofallback" >/dev/null
    [ ! -e "$tmp/nofallback" ] || fail "run A || run B: B ran although A succeeded"
    # past its timeout the command is killed: its exit status 124, its later work never done
    run -t 1 sh -c "sleep 20; touch '$tmp/slept'" >"$tmp/printed"
    rc=$?
    [ $rc -eq 124 ] || fail "a command past its 1 s timeout returned $rc, not 124"
    [ ! -e "$tmp/slept" ] || fail "a command past its 1 s timeout ran to its end"
    grep -qx 'exit 124: killed at its 1 s timeout' "$tmp/printed" \
      || fail "run did not say the command was killed at its 1 s timeout: $(cat "$tmp/printed")"
    run -o "$tmp/log" sh -c 'echo to-the-file; exit 3' >"$tmp/printed"
    [ $? -eq 3 ] || fail "run -o lost the exit status"
    grep -qx to-the-file "$tmp/log" || fail "run -o FILE did not write the output to FILE"
    # the deadline: a run never outlives it, and past it runs and steps are skipped
    now=1057 # 3 s left of 60
    run -t 50 sh -c "sleep 20; touch '$tmp/outlived'" >"$tmp/printed"
    rc=$?
    [ $rc -eq 124 ] || fail "a run with 3 s left and -t 50 returned $rc, not 124 (killed at the deadline)"
    [ ! -e "$tmp/outlived" ] || fail "a run outlived the deadline"
    grep -qx 'exit 124: killed at its 3 s timeout (cut from 50 s to the time left before the deadline)' \
      "$tmp/printed" || fail "run -t 50 with 3 s left was not cut to 3 s: $(cat "$tmp/printed")"
    now=1059 # 1 s left, DC_MIN_RUN 2
    run touch "$tmp/late" >/dev/null
    [ $? -eq "$DC_SKIP_RC" ] || fail "a run past the deadline did not return DC_SKIP_RC ($DC_SKIP_RC)"
    [ ! -e "$tmp/late" ] || fail "a run past the deadline still ran its command"
    dc_step "late step" 30 "late figure" >/dev/null && fail "dc_step past the deadline returned 0"
    fig "$DC_FIGS" "late figure" | grep -q $'\tskipped (deadline)\t-\tSKIP$' \
      || fail "dc_step did not record 'late figure' as skipped (deadline): $(cat "$DC_FIGS")"
    now=$DC_START
    dc_step "early step" 30 "early figure" >/dev/null || fail "dc_step with time left returned 1"
    figure "bad" 1 2 MAYBE 2>/dev/null && fail "figure accepted result MAYBE"
    dc_figures_from fallback printf 'a b\tv1\tg1\tPASS\nnoise\n' >/dev/null \
      || fail "dc_figures_from rejected a figure line"
    fig "$DC_FIGS" "a b" | grep -q $'^a b\tv1\tg1\tPASS$' || fail "dc_figures_from lost 'a b'"
    dc_figures_from fallback sh -c 'echo broken; exit 1' >/dev/null \
      && fail "dc_figures_from returned 0 for a failing command"
    fig "$DC_FIGS" fallback | grep -q 'FAIL$' || fail "a failing parser left no FAIL figure"
    exit 0
  ) || exit 1
}

case_trap() {
  # a check that records a figure, then fails: the summary holds the figure
  cat >"$tmp/fails.sh" <<EOF
. "$lib"
dc_init "$tmp/a"
dc_plan first second
figure first 42 ">= 1" PASS
exit 1
EOF
  bash "$tmp/fails.sh" >"$tmp/fails.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "the script's exit status 1 became $rc"
  [ -f "$tmp/a/summary.txt" ] || fail "no summary.txt after exit 1"
  grep -Eq '^first +42 +>= 1 +PASS$' "$tmp/a/summary.txt" \
    || fail "summary.txt lacks figure 'first': $(cat "$tmp/a/summary.txt")"
  grep -Eq '^second +not run' "$tmp/a/summary.txt" \
    || fail "the planned figure 'second' is not listed as not run"
  head -1 "$tmp/a/summary.txt" | grep -Eq '^figure +value +goal +result$' \
    || fail "summary.txt has no header line"
  # killed while a run hangs: the run's command dies too, and the summary is written
  cat >"$tmp/hangs.sh" <<EOF
. "$lib"
dc_init "$tmp/b"
dc_log "$tmp/b/log"
figure before 1 - INFO
run -t 120 sh -c 'echo \$\$ >"$tmp/child"; exec sleep 100'
figure after 1 - INFO
EOF
  bash "$tmp/hangs.sh" >/dev/null 2>&1 &
  pid=$!
  # waits for the run's command to start; a hang guard of 300 s
  for _ in $(seq 3000); do [ -s "$tmp/child" ] && break; sleep 0.1; done
  [ -s "$tmp/child" ] || fail "the hanging run's command did not start within 300 s: hung"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  # stopped, not run to its end: the run's command (sleep 100) would have ended it with 0
  [ $rc -eq 143 ] || fail "a check stopped by SIGTERM exited $rc, not 143"
  # the handler waits for the run's timeout process, which waits for its command: gone by now
  if kill -0 "$(cat "$tmp/child")" 2>/dev/null; then
    kill "$(cat "$tmp/child")"
    fail "the hanging run's command outlived the check"
  fi
  grep -q '^before ' "$tmp/b/summary.txt" || fail "summary.txt lacks 'before' after SIGTERM"
  grep -q '^after ' "$tmp/b/summary.txt" && fail "'after' was recorded although the check was stopped"
  grep -q 'exit 143' "$tmp/b/summary.txt" || fail "summary.txt does not give the exit status"
  grep -q 'got SIGTERM' "$tmp/b/log" || fail "the log lacks the signal message"
  grep -q '== summary' "$tmp/b/log" || fail "the log lacks the summary printed at exit"
}

# The parser on dpscale's real files (host backend), one figure per command.
case_summary() {
  local s=("$py" "$scripts/device_check_summary.py") o="$tmp/r" out
  # outside strict mode whatever the environment: the strict row's figure refuses this run
  DPSCALE_STRICT=0 "$dpscale" run --backend host --model small --steps 3 --check --out "$o" --name check >/dev/null \
    || fail "dpscale run --check failed on the host backend"
  "$dpscale" run --backend host --model small --steps 3 --gemm-ref --out "$o" --name gemm >/dev/null \
    || fail "dpscale run --gemm-ref failed on the host backend"
  "$dpscale" sweep --backend host --mode dp,ddp --gpus 1 --model tiny --steps 2 --warmup 1 \
    --out "$o" --name sweep >/dev/null 2>&1 || fail "dpscale sweep failed on the host backend"
  "$dpscale" links --backend host --gpus 1 --sizes 1M --steps 3 --out "$o" --name links >/dev/null \
    || fail "dpscale links failed on the host backend"
  out=$("${s[@]}" check "c" "$o/check")
  [[ $out == $'c\tstatus=ok check=pass max_rel_diff='*$'\tstatus ok, check pass\tPASS' ]] \
    || fail "check: $out"
  out=$("${s[@]}" check "c" "$o/gemm")
  [[ $out == *"check=off"*$'\tFAIL' ]] || fail "check on a run without --check passed: $out"
  # the row "strict mode on the host": the step's runs (a model file, 2 devices, --check, --strict)
  local m
  for m in dp ddp; do
    "$dpscale" run --backend host --strict --mode "$m" --gpus 2 --model "$here/fixtures/models/tiny-gpt.model" \
      --steps 3 --warmup 1 --check --out "$o" --name "strict-$m" >"$tmp/strict-$m.log" 2>&1 \
      || fail "dpscale run --strict --mode $m failed on the host backend: $(tail -n 3 "$tmp/strict-$m.log")"
  done
  out=$("${s[@]}" strict "S" "$o/strict-dp" 0 "$tmp/strict-dp.log" "$o/strict-ddp" 0 "$tmp/strict-ddp.log")
  [[ $out == $'S\t2/2 ok, check pass, strict: strict-dp, strict-ddp\t'*$'\tPASS' ]] || fail "strict: $out"
  out=$("${s[@]}" strict "S" "$o/check" 0 "$tmp/none")
  [[ $out == $'S\tcheck: '*'does not record "strict": true'*$'\tFAIL' ]] || fail "strict, a run without --strict: $out"
  echo "dpscale: strict device memory (DPSCALE_STRICT=1): the host dereferenced a device pointer" >"$tmp/fault.log"
  out=$("${s[@]}" strict "S" "$o/strict-dp" 70 "$tmp/fault.log")
  [[ $out == $'S\tstrict-dp: exit 70, status ok, check pass: dpscale: strict device memory'*$'\tFAIL' ]] \
    || fail "strict, exit 70: $out"
  out=$("${s[@]}" strict "S" "$o/strict-dp" 0 "$tmp/none" "$o/strict-ddp")
  [[ $out == $'S\tno figure: '*$'\tFAIL' ]] || fail "strict, not a triple: $out"
  out=$("${s[@]}" sweep "s" "$o/sweep" 2)
  # the sweep measures h2d and d2h from 4 KiB up to its largest copy, tiny's 8 KiB batch: 4 rows
  [[ $out == $'s\t2/2 ok; links.csv 4 rows\t2/2 ok, links measured\tPASS' ]] || fail "sweep: $out"
  out=$("${s[@]}" sweep "s" "$o/sweep" 3)
  [[ $out == *$'\tFAIL' ]] || fail "sweep with a configuration missing passed: $out"
  # the main job's figure: every configuration the sweep's --dry-run planned ended ok
  "$dpscale" sweep --backend host --mode dp,ddp --gpus 1 --model tiny --steps 2 --warmup 1 \
    --out "$o" --name sweep --dry-run >"$tmp/plan" 2>&1 || fail "dpscale sweep --dry-run failed"
  out=$("${s[@]}" suite M "$tmp/plan" "$o/sweep" 0)
  [[ $out == $'M\t2/2 ok, exit 0: dp-tiny-fp32-sgd-g1-b'*", ddp-tiny-fp32-sgd-g1-b"*$'\tevery configuration ends ok, exit 0\tPASS' ]] \
    || fail "suite: $out"
  out=$("${s[@]}" suite M "$tmp/plan" "$o/sweep" 1)
  [[ $out == $'M\t2/2 ok, exit 1: '*$'\tFAIL' ]] || fail "suite, the sweep exited 1: $out"
  sed 's/^   2  ddp-tiny/   2  ddp-other/' "$tmp/plan" >"$tmp/plan-other"
  out=$("${s[@]}" suite M "$tmp/plan-other" "$o/sweep" 0)
  [[ $out == $'M\t1/2 ok, exit 0: ddp-other-'*": no row (the sweep ended before it)"*$'\tFAIL' ]] \
    || fail "suite, a planned configuration without a row: $out"
  echo "dpscale: --filter x: no configuration matches" >"$tmp/plan-none"
  out=$("${s[@]}" suite M "$tmp/plan-none" "$o/sweep" 2)
  [[ $out == $'M\tno figure: '*"lists no configuration: dpscale: --filter x: no configuration matches"*$'\tFAIL' ]] \
    || fail "suite, nothing planned: $out"
  # the goals under the figures: met, not met (a figure failed), partly and not measured
  printf '%s\t%s\t%s\t%s\n' "main job dp gpus=1" v g PASS "memcheck dp" v g FAIL \
    "memcheck ddp" v g PASS "loss dp fp32 sgd vs torch gpus=1" v g PASS \
    "check dp fp32 sgd gpus=1" v g SKIP "phase loss dp gpt2-mlp bf16 vs torch" v g SKIP \
    "memory fsdp fp32 sgd vs torch fsdp gpus=1" v g FAIL "step real resnet50 fp32 vs torchvision" v g FAIL \
    "step real gpt2 fp32 vs transformers" v g PASS "memory real gpt2 bf16 vs transformers" v g PASS \
    >"$tmp/goals.tsv"
  out=$("${s[@]}" goals "$tmp/goals.tsv")
  grep -Eq '^  met +every configuration of the main job ends ok: 1 PASS$' <<<"$out" || fail "goals, met: $out"
  grep -Eq '^  not measured +the stream and memory contracts hold on the CPU .*: no figure$' <<<"$out" \
    || fail "goals: strict mode on the host: $out"
  grep -Eq "^  NOT MET +0 memcheck errors of dpscale's own: 1 PASS, 1 FAIL \(memcheck dp\)$" <<<"$out" \
    || fail "goals, not met: $out"
  grep -Eq '^  partly measured +every loss and check PASS: 1 PASS, 1 SKIP$' <<<"$out" \
    || fail "goals, partly measured: $out"
  grep -Eq "^  not measured +the loss phase no slower than PyTorch's \(gpt2-mlp bf16\): 1 SKIP$" <<<"$out" \
    || fail "goals, not measured: $out"
  grep -Eq "^  NOT MET +the step at most 1.05 x PyTorch's real modules' .*: 1 PASS, 1 FAIL \(step real resnet50 fp32 vs torchvision\)$" <<<"$out" \
    || fail "goals: the real modules' step: $out"
  grep -Eq "^  met +device 0's peak within 10 % of the real modules' max_memory_allocated: 1 PASS$" <<<"$out" \
    || fail "goals: the real modules' memory: $out"
  grep -Eq '^  not measured +memory within 10 % of .*: no figure$' <<<"$out" \
    || fail "goals: fsdp's memory (reported, not held to 10 %) counted: $out"
  out=$("${s[@]}" gemm "g" "$o/gemm" 0)
  [[ $out == $'g\t'*"(small fp32: model "*$'\t>= 0\tPASS' ]] || fail "gemm: $out"
  out=$("${s[@]}" gemm "g" "$o/check" 0.8)
  [[ $out == $'g\tno figure: '*"gemm_ref_tflops"*$'\tFAIL' ]] || fail "gemm without --gemm-ref: $out"
  out=$("${s[@]}" torch "t" "$o/check" "$o/check" 1.0)
  [[ $out == $'t\t1.000 ('*$'\t<= 1.0\tPASS' ]] || fail "torch, a run against itself: $out"
  out=$("${s[@]}" torch "t" "$o/check" "$o/check" 0.85)
  [[ $out == *$'\tFAIL' ]] || fail "torch, a ratio of 1 passed a goal of 0.85: $out"
  out=$("${s[@]}" cost "k" 0.01 "$o/check" -- "$o/check")
  [[ $out == $'k\t+0.00 % (with '*$'\t<= 1 %\tPASS' ]] || fail "cost, a run against itself: $out"
  printf 'src,dst,method,bytes,bw_gbps\n' >"$tmp/torch.csv"
  "$py" - "$o/links/links.csv" >>"$tmp/torch.csv" <<'PY' || fail "could not read links.csv"
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["method"] in ("h2d", "d2h"):  # 4 % slower than dpscale, then 10 %
        f = 1.04 if r["method"] == "h2d" else 1.10
        print(f"{r['src']},{r['dst']},{r['method']},{r['bytes']},{float(r['bw_gbps']) * f!r}")
PY
  out=$("${s[@]}" links L "$o/links" "$tmp/torch.csv" 0.05 h2d:host:dev0 d2h:dev0:host \
    d2d_write:dev0:dev1)
  # torch.csv's figures in full, whatever the bandwidths measured: 1 / 1.04 - 1 and 1 / 1.10 - 1
  [[ $(sed -n 1p <<<"$out") == $'L h2d host->dev0\t-3.8 % (dpscale '*$'\twithin 5 %\tPASS' ]] \
    || fail "links h2d: $out"
  [[ $(sed -n 2p <<<"$out") == $'L d2h dev0->host\t-9.1 % '*$'\tFAIL' ]] || fail "links d2h: $out"
  [[ $(sed -n 3p <<<"$out") == $'L d2d_write dev0->dev1\tno row for '*$'\tFAIL' ]] \
    || fail "links, a path nobody measured: $out"
  out=$("${s[@]}" links L "$o/nothing" "$tmp/torch.csv" 0.05 h2d:host:dev0 d2h:dev0:host)
  [ "$(grep -c $'\tno figure: no .*links.csv.*\tFAIL$' <<<"$out")" -eq 2 ] \
    || fail "links without links.csv: $out"
  # memcheck's logs (tests/fixtures/sanitizer): NCCL's probing of its kernels alone (4 CUDA API
  # errors inside libnccl, exit 9) passes; beside it a write out of bounds in dpscale's kernel, or
  # a CUDA API error of dpscale's own call, fails
  local sf="$here/fixtures/sanitizer"
  out=$("${s[@]}" sanitizer m "$sf/nccl-probes.log" 9 "$o/check")
  [[ $out == $'m\t0 errors of dpscale\'s own (4 CUDA API errors inside NCCL, not counted), exit 9\t'*$'\tPASS' ]] \
    || fail "sanitizer, NCCL's probing alone: $out"
  out=$("${s[@]}" sanitizer m "$sf/own-write.log" 9 "$o/check")
  [[ $out == $'m\t1 errors of dpscale\'s own (4 CUDA API errors inside NCCL, not counted), exit 9; 0 CUDA API and 1 memory errors printed, the first: Invalid __global__ write of size 4 bytes;'*$'\tFAIL' ]] \
    || fail "sanitizer, a write out of bounds: $out"
  out=$("${s[@]}" sanitizer m "$sf/own-api.log" 9 "$o/check")
  [[ $out == $'m\t1 errors of dpscale\'s own (4 '*"1 CUDA API and 0 memory errors printed, the first: Program hit cudaErrorInvalidValue"*$'\tFAIL' ]] \
    || fail "sanitizer, dpscale's own API error: $out"
  printf '========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n========= ERROR SUMMARY: 0 errors\n' >"$tmp/san0"
  out=$("${s[@]}" sanitizer m "$tmp/san0" 0 "$o/check")
  [[ $out == $'m\t0 errors of dpscale\'s own (0 CUDA API errors inside NCCL, not counted), exit 0\t'*$'\tPASS' ]] \
    || fail "sanitizer, no error: $out"
  # errors past the print limit count: the summary's total less NCCL's
  sed 's/ERROR SUMMARY: 4 errors/ERROR SUMMARY: 6 errors/' "$sf/nccl-probes.log" >"$tmp/san-unprinted"
  out=$("${s[@]}" sanitizer m "$tmp/san-unprinted" 9 "$o/check")
  [[ $out == $'m\t2 errors of dpscale\'s own '*"(past the print limit)"*$'\tFAIL' ]] || fail "sanitizer, errors not printed: $out"
  for rc in 1 124; do # NCCL's errors alone, but the run crashed or hung: the exit status fails it
    out=$("${s[@]}" sanitizer m "$sf/nccl-probes.log" $rc "$o/check")
    [[ $out == *"the run or the tool failed (exit $rc)"*$'\tFAIL' ]] || fail "sanitizer, exit $rc: $out"
  done
  out=$("${s[@]}" sanitizer m "$tmp/san0" 9 "$o/check")
  [[ $out == *$'\tFAIL' ]] || fail "sanitizer, exit 9 without an error: $out"
  out=$("${s[@]}" sanitizer m "$sf/nccl-probes.log" 9 "$o/sweep")
  [[ $out == *$'\tPASS' ]] || fail "sanitizer, a folder whose last run is ok: $out"
  "$py" - "$o/check/runs.csv" "$tmp/failed" <<'PY' || fail "could not write a failed run's folder"
import csv, os, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
rows[-1]["status"], rows[-1]["error"] = "error", "rank 1 exited"
os.makedirs(sys.argv[2])
with open(os.path.join(sys.argv[2], "runs.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
PY
  out=$("${s[@]}" sanitizer m "$tmp/san0" 0 "$tmp/failed")
  [[ $out == *"dpscale's run ended error: rank 1 exited"$'\t'*$'\tFAIL' ]] || fail "sanitizer, the run failed: $out"
  printf 'no summary\n' >"$tmp/san-none"
  out=$("${s[@]}" sanitizer m "$tmp/san-none" 0 "$o/check")
  [[ $out == *"did not report"*$'\tFAIL' ]] || fail "sanitizer without a report: $out"
  printf '==PROF== Connected to process 1\n==PROF== Profiling "xent_kernel" - 0: 0%%....50%%....100%% - 1 pass\n==PROF== Profiling "sgd_kernel" - 1: 0%%....100%% - 1 pass\n' >"$tmp/cap"
  printf '  xent_kernel (16, 1, 1)x(256, 1, 1)\n    NVTX Push/Pop Stack for Thread 7:\n      dpscale\n        <0,step>\n' >"$tmp/imp"
  out=$("${s[@]}" ncu "n" "$tmp/cap" "$tmp/imp" step)
  [[ $out == $'n kernels\t2 profiled under the NVTX include filter\t>= 1, no ncu error\tPASS\nn report\tthe report names range \'step\'\trange named\tPASS' ]] \
    || fail "ncu: $out"
  printf '==ERROR== ERR_NVGPUCTRPERM - no permission\n' >>"$tmp/cap"
  out=$("${s[@]}" ncu "n" "$tmp/cap" "$tmp/imp" step)
  [[ $(sed -n 1p <<<"$out") == *"1 ncu error(s), the first: ==ERROR== ERR_NVGPUCTRPERM"*$'\tFAIL' ]] \
    || fail "ncu with an error: $out"
  printf 'steps\n' >"$tmp/imp-none"
  out=$("${s[@]}" ncu "n" "$tmp/imp-none" "$tmp/imp-none" step)
  [ "$(grep -c $'\tFAIL$' <<<"$out")" -eq 2 ] || fail "ncu with nothing profiled: $out"
  [ "$("${s[@]}" field "$o/check" status)" = ok ] || fail "field status"
  "${s[@]}" gemm only-one-argument >/dev/null 2>&1 && fail "the parser took a short command line"
  return 0
}

# A copy of results folder $1 as $2 with a column of one of its files scaled:
# alter SRC DST FILE COLUMN FACTOR [ROW] (every row, or the ROW-th, 0-based).
alter() {
  cp -r "$1" "$2"
  "$py" - "$2/$3" "$4" "$5" "${6:-}" <<'PY' || fail "could not alter $2/$3"
import csv, sys
path, col, f, only = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
rows = list(csv.DictReader(open(path, newline="")))
for i, r in enumerate(rows):
    if only == "" or i == int(only):
        r[col] = f"{float(r[col]) * f:.9g}" if col != "alloc_peak_bytes" else str(int(float(r[col]) * f))
with open(path, "w", newline="") as out:
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
PY
}

# A copy of results folder $1 as $2 labelled as mode $3 (a sharded mode dpscale has and
# dpstools.results may not know): config_id's first word in every file, runs.csv's mode.
relabel() {
  cp -r "$1" "$2"
  "$py" - "$2" "$3" <<'PY' || fail "could not relabel $2"
import csv, os, sys
folder, mode = sys.argv[1], sys.argv[2]
for name in os.listdir(folder):
    if not name.endswith(".csv"):
        continue
    path = os.path.join(folder, name)
    reader = csv.DictReader(open(path, newline=""))
    rows = list(reader)
    for r in rows:
        r["config_id"] = mode + "-" + r["config_id"].split("-", 1)[1]
        if name == "runs.csv":
            r["mode"] = mode
    with open(path, "w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=reader.fieldnames, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
PY
}

# A copy of results folder $1 as $2 with set times, the figures' inputs made known:
# pin SRC DST STEP_MS DEVICE:PHASE=MS... (runs.csv's step_ms_median when STEP_MS is not -,
# phases.csv's median_ms of each DEVICE:PHASE named).
pin() {
  cp -r "$1" "$2"
  "$py" - "$2" "${@:3}" <<'PY' || fail "could not pin the times of $2"
import csv, sys
folder, step, cells = sys.argv[1], sys.argv[2], dict(a.split("=") for a in sys.argv[3:])


def rewrite(name, fn):
    path = f"{folder}/{name}"
    rows = [fn(r) for r in csv.DictReader(open(path, newline=""))]
    with open(path, "w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def phase(r):
    ms = cells.pop(f"{r['device']}:{r['phase']}", None)
    return r if ms is None else dict(r, median_ms=ms)


rewrite("phases.csv", phase)
if cells:
    sys.exit(f"pin: no phases.csv row for {sorted(cells)}")
if step != "-":
    rewrite("runs.csv", lambda r: dict(r, step_ms_median=step))
PY
}

# device_check_compare.py's figures: each passes on a folder against itself or within its
# goal, and fails on an altered copy, a missing file or another configuration.
case_compare() {
  local c=("$py" "$scripts/device_check_compare.py") o="$tmp/r" out
  "$dpscale" run --backend host --model small --steps 4 --warmup 1 --gemm-ref --out "$o" --name a \
    >/dev/null || fail "dpscale run failed on the host backend"
  "$dpscale" run --backend host --model small --steps 4 --warmup 1 --optimizer adamw --out "$o" \
    --name adamw >/dev/null || fail "dpscale run --optimizer adamw failed"
  "$dpscale" run --backend host --mode ddp --gpus 2 --model small --steps 4 --warmup 1 --out "$o" \
    --name ddp >/dev/null || fail "dpscale ddp failed on the host backend"
  out=$("${c[@]}" losses L "$o/a" "$o/a" fp32)
  [[ $out == $'L\t0 at step 0 of 4 ('*$'\tevery step within 1e-05 relative\tPASS' ]] || fail "losses, itself: $out"
  alter "$o/a" "$o/loss" steps.csv loss 1.0001 2
  out=$("${c[@]}" losses L "$o/loss" "$o/a" fp32)
  [[ $out == $'L\t0.0001 at step 2 of 4 '*"meson test --suite torch"*$'\tFAIL' ]] || fail "losses 1e-4 off, fp32: $out"
  out=$("${c[@]}" losses L "$o/loss" "$o/a" bf16)
  [[ $out == *$'\tevery step within 0.02 relative\tPASS' ]] || fail "losses 1e-4 off, bf16 tolerance: $out"
  out=$("${c[@]}" losses L "$o/adamw" "$o/a" fp32)
  [[ $out == $'L\tno figure: '*"not the same configuration"*$'\tFAIL' ]] || fail "losses, other optimizer: $out"
  # a sharded mode against PyTorch's ddp-labelled run: matched by columns, not config_id
  relabel "$o/a" "$o/fsdp" fsdp
  out=$("${c[@]}" sharded_losses L "$o/fsdp" "$o/a" fp32)
  [[ $out == $'L\t0 at step 0 of 4 ('*"; fsdp-small-fp32-sgd-g1-b16 against dp-small-"*$'\tevery step within 1e-05 relative\tPASS' ]] \
    || fail "sharded_losses, itself relabelled: $out"
  out=$("${c[@]}" sharded_losses L "$o/fsdp" "$o/loss" fp32)
  [[ $out == $'L\t0.0001 at step 2 of 4 '*$'\tFAIL' ]] || fail "sharded_losses 1e-4 off: $out"
  out=$("${c[@]}" sharded_losses L "$o/fsdp" "$o/adamw" fp32)
  [[ $out == $'L\tno figure: '*"optimizer sgd and adamw"*"differ"*$'\tFAIL' ]] \
    || fail "sharded_losses, other optimizer: $out"
  out=$("${c[@]}" sharded_losses L "$o/nothing" "$o/a" fp32)
  [[ $out == $'L\tno figure: no '*"runs.csv"*$'\tFAIL' ]] || fail "sharded_losses, no folder: $out"
  out=$("${c[@]}" sharded_memory P "$o/fsdp" "$o/a")
  [[ $out == $'P\tdevice 0: dpscale '*" MiB at its peak ("*"parameters "*"), torch max_memory_allocated "*$'; +0.0 %\treported\tINFO' ]] \
    || fail "sharded_memory, memory.csv against its own devices.csv: $out"
  out=$("${c[@]}" memory M "$o/a" "$o/a" 0.10)
  [[ $out == $'M\tdevice 0 +0.0 % (dpscale '*$'\teach device within 10 %\tPASS' ]] || fail "memory, itself: $out"
  alter "$o/a" "$o/mem" devices.csv alloc_peak_bytes 1.2
  out=$("${c[@]}" sharded_memory P "$o/fsdp" "$o/mem")
  [[ $out == *$'; -16.7 %\treported\tINFO' ]] || fail "sharded_memory, PyTorch's peak 20 % more: $out"
  out=$("${c[@]}" memory M "$o/mem" "$o/a" 0.10)
  [[ $out == $'M\tdevice 0 +20.0 % '*$'\tFAIL' ]] || fail "memory 20 % more: $out"
  out=$("${c[@]}" memory M "$o/a" "$o/mem" 0.20)
  [[ $out == $'M\tdevice 0 -16.7 % '*$'\tPASS' ]] || fail "memory 16.7 % less, goal 20 %: $out"
  out=$("${c[@]}" step S "$o/a" "$o/a" 0.85)
  [[ $out == $'S\t1.000 ('*$'\t<= 0.85\tFAIL' ]] || fail "step, a ratio of 1 against 0.85: $out"
  alter "$o/a" "$o/slow" runs.csv step_ms_median 2
  out=$("${c[@]}" step S "$o/a" "$o/slow" 0.85)
  [[ $out == $'S\t0.500 ('*"its wait for Python not measured"*$'\t<= 0.85\tPASS' ]] || fail "step, twice as fast: $out"
  "$py" - "$o/slow/phases.csv" <<'PY' || fail "could not add python_overhead_ms"
import csv, sys  # PyTorch's column on GPUs: 0.25 ms of device 0's wait for Python a phase
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
for r in rows:
    r["python_overhead_ms"] = "0.25" if r["device"] == "0" else ""
with open(sys.argv[1], "w", newline="") as out:
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
PY
  out=$("${c[@]}" step S "$o/a" "$o/slow" 0.85)
  [[ $out == *" ms, of which its device waited for Python 3.000 ms)"$'\t<= 0.85\tPASS' ]] \
    || fail "step, PyTorch's wait for Python (12 phases of 0.25 ms): $out"
  out=$("${c[@]}" phase P "$o/a" "$o/a" loss 1.0)
  [[ $out == $'P\t1.000 (dp-small-fp32-sgd-g1-b16: loss on device 0, dpscale '*$'\t<= 1.0\tPASS' ]] \
    || fail "phase, a run against itself: $out"
  alter "$o/a" "$o/phases2" phases.csv median_ms 2
  out=$("${c[@]}" phase P "$o/phases2" "$o/a" loss 1.0)
  [[ $out == $'P\t2.000 ('*"scripts/profile.sh"*$'\t<= 1.0\tFAIL' ]] || fail "phase, twice as slow: $out"
  out=$("${c[@]}" phase P "$o/a" "$o/phases2" nothing 1.0)
  [[ $out == $'P\tno figure: '*"device 0 has no phase nothing"*$'\tFAIL' ]] || fail "phase, no such phase: $out"
  out=$("${c[@]}" tflops T "$o/a" 0)
  [[ $out == $'T\t'*"(small fp32: model "*$'\t>= 0\tPASS' ]] || fail "tflops: $out"
  out=$("${c[@]}" tflops T "$o/adamw" 0.8)
  [[ $out == $'T\tno figure: '*"gemm_ref_tflops"*$'\tFAIL' ]] || fail "tflops without --gemm-ref: $out"
  # the share of a step of 10 ms outside the GEMMs: 4.75 ms of phases without one (device 0)
  pin "$o/a" "$o/nongemm" 10 0:forward=2 0:backward=3 0:optimizer=1.5 0:loss=1 0:load=0.75 \
    0:replicate=0.25 0:scatter=0.25 0:gather=0.25 0:reduce=0.25 0:allreduce_exposed=0.25 0:unscale=0.25
  out=$("${c[@]}" nongemm N "$o/nongemm" 0.5)
  [[ $out == $'N\t0.475 of 10.000 ms (largest: optimizer 1.500 ms, loss 1.000 ms, load 0.750 ms); all but the GEMMs alone: '*$'\t<= 0.5\tPASS' ]] \
    || fail "nongemm, 4.75 ms of 10 against 0.5: $out"
  out=$("${c[@]}" nongemm N "$o/nongemm" 0.45)
  [[ $out == $'N\t0.475 of 10.000 ms '*$'\t<= 0.45\tFAIL' ]] || fail "nongemm, 4.75 ms of 10 against 0.45: $out"
  # the exposed part of each device's all-reduce: 0.25 of 2 ms on device 0, 0.5 on device 1
  pin "$o/ddp" "$o/overlap" - 0:allreduce=2 0:allreduce_exposed=0.5 1:allreduce=2 1:allreduce_exposed=1
  out=$("${c[@]}" overlap V "$o/overlap" 0.5)
  [[ $out == $'V\t0.500 on device 1 (allreduce 2.000 ms, exposed 1.000 ms)\texposed <= 0.5 x allreduce\tPASS' ]] \
    || fail "overlap, half the all-reduce exposed against 0.5: $out"
  out=$("${c[@]}" overlap V "$o/overlap" 0.4)
  [[ $out == $'V\t0.500 on device 1 '*$'\texposed <= 0.4 x allreduce\tFAIL' ]] \
    || fail "overlap, half the all-reduce exposed against 0.4: $out"
  alter "$o/ddp" "$o/exposed" phases.csv median_ms 0
  out=$("${c[@]}" overlap V "$o/exposed" 0.5)
  [[ $out == $'V\tno figure: '*"no all-reduce timed"*$'\tFAIL' ]] || fail "overlap, no all-reduce time: $out"
  out=$("${c[@]}" overlap V "$o/a" 0.5)
  [[ $out == $'V\tno figure: '*"no all-reduce timed"*$'\tFAIL' ]] || fail "overlap on dp: $out"
  "$dpscale" run --backend host --mode ddp --gpus 2 --model tiny --steps 4 --warmup 1 \
    --inject-fault 1:2:exit --out "$o" --name fault >/dev/null 2>&1
  rc=$?
  out=$("${c[@]}" fault F "$o/fault" error 1 "$rc" 3 60)
  [[ $out == $'F\tstatus error (rank 1 exited '*", exit 1, 3 s"$'\ta row with status error, exit 1, within 60 s\tPASS' ]] \
    || fail "fault: $out"
  out=$("${c[@]}" fault F "$o/fault" timeout 1 "$rc" 3 60)
  [[ $out == *$'\tFAIL' ]] || fail "fault with another status passed: $out"
  out=$("${c[@]}" fault F "$o/fault" error 1 124 60 60)
  [[ $out == $'F\tkilled by the check\'s timeout after 60 s (exit 124): the run hung'*$'\tFAIL' ]] || fail "fault, hung: $out"
  # a real module's run (its own config_id and model name): matched by columns, not config_id
  relabel "$o/a" "$o/real" dp
  "$py" - "$o/real" <<'PY' || fail "could not rename the model of $o/real"
import csv, json, os, sys
folder = sys.argv[1]
for name in ("runs.csv", "devices.csv", "steps.csv", "phases.csv"):
    path = os.path.join(folder, name)
    reader = csv.DictReader(open(path, newline=""))
    rows = list(reader)
    for r in rows:
        r["config_id"] = r["config_id"].replace("-small-", "-resnet50-")
        if name == "runs.csv":
            r["model"], r["step_ms_median"] = "resnet50", f"{float(r['step_ms_median']) * 2:.6f}"
    with open(path, "w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=reader.fieldnames, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
meta = json.load(open(os.path.join(folder, "meta.json")))
meta["module"] = {"spec": "torchvision.models:resnet50", "model_file": ""}
json.dump(meta, open(os.path.join(folder, "meta.json"), "w"))
PY
  out=$("${c[@]}" real_step R "$o/a" "$o/real" 1.05)
  [[ $out == $'R	0.500 (dpscale small against PyTorch\'s torchvision.models:resnet50: dpscale '*$'	<= 1.05	PASS' ]] \
    || fail "real_step, PyTorch's module twice as slow: $out"
  out=$("${c[@]}" real_step R "$o/real" "$o/a" 1.05)
  [[ $out == $'R	2.000 ('*"a finding, not a crash"*$'	<= 1.05	FAIL' ]] || fail "real_step, twice as slow: $out"
  out=$("${c[@]}" real_memory R "$o/a" "$o/real" 0.10)
  [[ $out == $'R	device 0 +0.0 % (dpscale '*"torchvision.models:resnet50)"$'	within 10 %	PASS' ]] \
    || fail "real_memory, the same peak: $out"
  out=$("${c[@]}" real_memory R "$o/mem" "$o/real" 0.10)
  [[ $out == $'R	device 0 +20.0 % '*"a finding, not a crash"*$'	within 10 %	FAIL' ]] \
    || fail "real_memory, 20 % more: $out"
  out=$("${c[@]}" real_memory R "$o/adamw" "$o/real" 0.10)
  [[ $out == $'R	no figure: '*"optimizer adamw and sgd"*"differ"*$'	FAIL' ]] \
    || fail "real_memory, other optimizer: $out"
  out=$("${c[@]}" --rehearsal "no GPU" memory M "$o/a" "$o/a" 0.10)
  [[ $out == $'M\tno GPU; rehearsal gave PASS: device 0 +0.0 %'*$'\tSKIP' ]] || fail "rehearsal: $out"
  out=$("${c[@]}" losses L "$o/nothing" "$o/a" fp32)
  [[ $out == $'L\tno figure: no '*"runs.csv"*$'\t-\tFAIL' ]] || fail "losses, no folder: $out"
  "${c[@]}" losses only-two args >/dev/null 2>&1 && fail "the helper took a short command line"
  # NVML's bytes over a links run: written counters (32-bit, one wrapped) against links.csv
  local b=("$py" "$scripts/device_check_backend.py")
  mkdir -p "$tmp/lk"
  printf 'src,dst,method,bytes,bw_gbps,latency_us,status,backend,emulated\nhost,dev0,h2d,1000,1,,ok,cuda,0\ndev0,host,d2h,1000,1,,ok,cuda,0\n' >"$tmp/lk/links.csv"
  printf '100 4294967000 32\n' >"$tmp/before"
  printf '10200 20000 32\n' >"$tmp/after"
  out=$("${b[@]}" nvml-links K "$tmp/lk" 10 "$tmp/before" "$tmp/after")
  [[ $out == $'K\tRX 0.000 GB for h2d 0.000 GB (2.03x), TX 0.000 GB for d2h 0.000 GB (1.01x)\t'*$'\tPASS' ]] \
    || fail "nvml-links: $out"
  out=$("${b[@]}" nvml-links K "$tmp/lk" 20 "$tmp/before" "$tmp/after")
  [[ $out == *"NVML counted fewer bytes"*$'\tFAIL' ]] || fail "nvml-links, fewer bytes than copied: $out"
  "${b[@]}" nvml-read "$tmp/none" # no NVML here: the reason is written
  out=$(LD_LIBRARY_PATH=/nonexistent "${b[@]}" nvml-links K "$tmp/lk" 10 "$tmp/none" "$tmp/after")
  if grep -q '^error' "$tmp/none"; then
    [[ $out == $'K\tno NVML counters: '*$'\tFAIL' ]] || fail "nvml-links without counters: $out"
  fi
  return 0
}

# dc_main_filter on bench/default.suite's configurations (the host backend's, 1 and 2 devices):
# it keeps exactly the weak-scaling fp32 SGD ones of its mode on those devices, accumulation's
# included, strong scaling's left out.
case_mainjob() {
  (
    # shellcheck source-path=SCRIPTDIR source=../scripts/device-check-lib.sh
    . "$lib"
    local suite="$here/../bench/default.suite" m n all kept want
    all=$("$dpscale" sweep "$suite" --backend host --dry-run | awk '$1 ~ /^[0-9]+$/ {print $2}')
    [ -n "$all" ] || fail "the suite's --dry-run listed nothing"
    for m in dp ddp; do
      for n in 1 2; do
        kept=$("$dpscale" sweep "$suite" --backend host --filter "$(dc_main_filter "$m" "$n")" \
          --dry-run | awk '$1 ~ /^[0-9]+$/ {print $2}')
        local tail='(-acc[0-9]+)?'
        [ "$m" = ddp ] && tail='(-acc[0-9]+(-syncall)?)?-bk[0-9.]+'
        want=$(grep -E "^$m-[a-z0-9.-]+-fp32-sgd-g$n-b[0-9]+$tail\$" <<<"$all")
        [ -n "$want" ] || fail "$m on $n: the suite has no such configuration (the test's rule)"
        [ "$kept" = "$want" ] || fail "$m on $n devices: the filter kept [$kept], not [$want]"
        grep -q -- -strong <<<"$kept" && fail "$m on $n devices: strong scaling kept: $kept"
      done
    done
    grep -q -- "-acc4-syncall-" <<<"$("$dpscale" sweep "$suite" --backend host \
      --filter "$(dc_main_filter ddp 2)" --dry-run)" || fail "ddp's accumulation without no_sync left out"
    dc_main_filter fsdp 1 2>/dev/null && fail "dc_main_filter took mode fsdp"
    exit 0
  ) || exit 1
}

# profile.sh hands nsys --trace-fork-before-exec=true (ddp's ranks are forked without exec).
case_profile() {
  mkdir -p "$tmp/bin"
  cat >"$tmp/bin/nsys" <<EOF
#!/bin/sh
echo "\$*" >>"$tmp/nsys-args"
EOF
  chmod +x "$tmp/bin/nsys"
  PATH="$tmp/bin:$PATH" DPSCALE="$dpscale" bash "$scripts/profile.sh" --model tiny --steps 2 \
    >"$tmp/profile.out" 2>&1 || fail "profile.sh with a stand-in nsys: $(cat "$tmp/profile.out")"
  local first name
  first=$(head -1 "$tmp/nsys-args")
  name=$(sed -n 's/.*--name \(profile-[^ ]*\).*/\1/p' <<<"$first")
  [ -n "$name" ] && rm -rf "$here/../results/$name" # the folder profile.sh made
  [[ $first == profile\ * ]] || fail "the first nsys call is not 'nsys profile': $first"
  [[ " $first " == *" --trace-fork-before-exec=true "* ]] \
    || fail "nsys profile lacks --trace-fork-before-exec=true: $first"
}

case_syntax() {
  local f
  for f in "$scripts/device-check.sh" "$lib" "$scripts/profile.sh" "$0"; do
    bash -n "$f" || fail "bash -n $f"
  done
  if command -v shellcheck >/dev/null; then
    shellcheck -x "$scripts/device-check.sh" "$lib" "$scripts/profile.sh" "$0" \
      || fail "shellcheck found problems (above)"
  else
    echo "shellcheck not installed: only bash -n checked"
  fi
  "$py" -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' \
    "$scripts/device_check_summary.py" "$scripts/torch_copies.py" "$scripts/device_check_backend.py" \
    "$scripts/device_check_compare.py" \
    || fail "python cannot parse the check's scripts"
}

case " $cases " in
  *" $case_ "*) "case_$case_" ;;
  *) fail "unknown case '$case_': expected run, trap, summary, compare, mainjob, profile or syntax" ;;
esac
echo "ok $case_"
