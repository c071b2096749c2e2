# Helpers of scripts/device-check.sh, kept apart so that tests can source
# them: run() (a command under a timeout, returning its own exit status),
# an overall deadline that no run outlives, and figures recorded as they
# come and written to OUTDIR/summary.txt by an EXIT trap, so the summary
# exists however the check ends (a failed build, a hang, a signal).
#
#   . scripts/device-check-lib.sh
#   dc_init OUTDIR              start the clock and the traps (bash only)
#   dc_log FILE                 copy everything printed from now on to FILE
#   dc_plan NAME...             figures the check means to record; any left
#                               unrecorded at exit are listed as not run
#   figure NAME VALUE GOAL RESULT   RESULT: PASS, FAIL, SKIP or INFO
#   dc_step TITLE SECONDS FIG...    a heading; 1, with FIGs recorded as
#                               'skipped (deadline)', when SECONDS are not left
#   run [-t SECONDS] [-o FILE] CMD...
#                               CMD under `timeout` (default DC_RUN_TIMEOUT,
#                               never beyond the deadline); returns CMD's exit
#                               status, 124 when it was killed at its timeout,
#                               DC_SKIP_RC when no time was left to start it
#   dc_was_skipped FIG RC       0, recording FIG as skipped, if RC is DC_SKIP_RC
#   dc_at_exit FUNC             FUNC runs in the EXIT trap after summary.txt
#                               is written (e.g. to pack the results)
#   dc_main_filter MODE NGPUS   the --filter that picks the main job's
#                               configurations of MODE (dp, ddp) out of a
#                               suite: fp32, SGD, weak scaling, NGPUS devices
#
# Settings (environment, read by dc_init): DC_BUDGET total seconds from
# dc_init (default 470: the check is one call under 8 minutes), DC_RESERVE seconds kept for the summary and packing
# (20), DC_RUN_TIMEOUT default per-run seconds (90), DC_MIN_RUN fewest
# seconds worth starting a run for (5).
# shellcheck shell=bash

DC_SKIP_RC=75

dc_now() { date +%s; }

dc_init() {
  DC_OUT=${1:?dc_init OUTDIR}
  mkdir -p "$DC_OUT" || { echo "device-check: cannot create $DC_OUT" >&2; return 1; }
  DC_START=$(dc_now)
  DC_BUDGET=${DC_BUDGET:-470}
  DC_RESERVE=${DC_RESERVE:-20}
  DC_RUN_TIMEOUT=${DC_RUN_TIMEOUT:-90}
  DC_MIN_RUN=${DC_MIN_RUN:-5}
  DC_FIGS="$DC_OUT/summary.tsv"
  DC_PLANNED="$DC_OUT/.planned"
  DC_CHILD=
  DC_TEE_PID=
  DC_EXIT_FUNCS=()
  DC_STEP_TITLE="start"
  : >"$DC_FIGS"
  : >"$DC_PLANNED"
  trap dc_on_exit EXIT
  trap 'dc_on_signal INT 130' INT
  trap 'dc_on_signal TERM 143' TERM
  trap 'dc_on_signal HUP 129' HUP
}

dc_log() {
  exec > >(tee "$1") 2>&1
  DC_TEE_PID=$!
}

# Seconds left for runs: the deadline less the reserve (may be negative).
dc_left() { echo $((DC_START + DC_BUDGET - DC_RESERVE - $(dc_now))); }

dc_elapsed() { echo $(($(dc_now) - DC_START)); }

dc_plan() {
  local n
  for n in "$@"; do printf '%s\n' "$n" >>"$DC_PLANNED"; done
}

# A field of a figure: no tabs or newlines, never empty.
dc_field() {
  local s=${1//$'\t'/ }
  s=${s//$'\n'/ }
  printf '%s' "${s:--}"
}

figure() {
  if [ $# -ne 4 ]; then
    echo "device-check: figure needs NAME VALUE GOAL RESULT, got $# argument(s): $*" >&2
    return 2
  fi
  case $4 in
    PASS|FAIL|SKIP|INFO) ;;
    *) echo "device-check: figure $1: result '$4' is not PASS, FAIL, SKIP or INFO" >&2; return 2 ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$(dc_field "$1")" "$(dc_field "$2")" "$(dc_field "$3")" "$4" >>"$DC_FIGS"
  printf 'figure: %s = %s (goal %s): %s\n' "$1" "$2" "$3" "$4"
}

# Figures printed by a command as NAME<TAB>VALUE<TAB>GOAL<TAB>RESULT lines;
# when it prints none or fails, FALLBACK is recorded as FAIL with the reason.
dc_figures_from() {
  local fallback=$1 out rc line tabs name value goal result n=0
  shift
  out=$("$@" 2>&1)
  rc=$?
  while IFS= read -r line; do
    tabs=${line//[^$'\t']/}
    if [ ${#tabs} -eq 3 ]; then
      IFS=$'\t' read -r name value goal result <<<"$line"
      figure "$name" "$value" "$goal" "$result" && n=$((n + 1))
    elif [ -n "$line" ]; then
      printf '%s\n' "$line"
    fi
  done <<<"$out"
  if [ "$rc" -ne 0 ] || [ "$n" -eq 0 ]; then
    figure "$fallback" "no figure (exit $rc: $(printf '%s' "$out" | tail -n 1))" "-" FAIL
    return 1
  fi
}

dc_step() {
  local title=$1 need=$2 left n
  shift 2
  DC_STEP_TITLE=$title
  left=$(dc_left)
  echo
  echo "== $title (at $(dc_elapsed) s, $left s left, about $need s needed)"
  if [ "$left" -lt "$need" ]; then
    for n in "$@"; do figure "$n" "skipped (deadline)" "-" SKIP; done
    return 1
  fi
  return 0
}

run() {
  local t=$DC_RUN_TIMEOUT file="" left rc t0 cut=""
  while [ $# -gt 0 ]; do
    case $1 in
      -t) t=$2; shift 2 ;;
      -o) file=$2; shift 2 ;;
      *) break ;;
    esac
  done
  if [ $# -eq 0 ]; then
    echo "device-check: run needs a command" >&2
    return 2
  fi
  left=$(dc_left)
  echo "+ $*"
  if [ "$left" -lt "$DC_MIN_RUN" ]; then
    echo "skipped (deadline): $left s left before the deadline"
    return "$DC_SKIP_RC"
  fi
  if [ "$left" -lt "$t" ]; then
    cut=" (cut from $t s to the time left before the deadline)"
    t=$left
  fi
  t0=$(dc_now)
  if [ -n "$file" ]; then
    timeout --kill-after=10 "$t" "$@" >"$file" 2>&1 &
  else
    timeout --kill-after=10 "$t" "$@" &
  fi
  DC_CHILD=$!
  wait "$DC_CHILD"
  rc=$?
  DC_CHILD=
  if [ -n "$file" ]; then
    echo "(output in $file; its last lines:)"
    tail -n 25 "$file"
  fi
  case $rc in
    124|137) echo "exit $rc: killed at its ${t} s timeout$cut" ;;
    *) echo "exit $rc ($(($(dc_now) - t0)) s)" ;;
  esac
  return "$rc"
}

dc_at_exit() { DC_EXIT_FUNCS+=("$1"); }

# A glob over config_id (MODE-MODEL-fp32-sgd-gN-bB, then -accK[-syncall] with accumulation,
# then ddp's -bkX): after the batch's digits comes the end, -acc or -bk, never -strong, so strong
# scaling is left out (on all the devices it runs the same batch again; the suites give no strong
# scaling with accumulation), and so are the sharded sweep's AdamW and bf16 and fp16.
dc_main_filter() {
  case $1 in
    dp) printf 'dp-*-fp32-sgd-g%s-b*[0-9]' "$2" ;;
    ddp) printf 'ddp-*-fp32-sgd-g%s-b*[0-9]-[ab]*' "$2" ;;
    *) echo "device-check: dc_main_filter: mode '$1' is not dp or ddp" >&2; return 2 ;;
  esac
}

# 0, with FIG recorded as 'skipped (deadline)', when RC says run had no time.
dc_was_skipped() {
  [ "$2" -eq "$DC_SKIP_RC" ] || return 1
  figure "$1" "skipped (deadline)" "-" SKIP
}

dc_on_signal() {
  trap '' PIPE # the log's tee may be gone: a write must not end this handler
  echo "device-check: got SIG$1 during '$DC_STEP_TITLE'; stopping"
  if [ -n "${DC_CHILD:-}" ]; then
    kill -TERM "$DC_CHILD" 2>/dev/null
    wait "$DC_CHILD" 2>/dev/null
  fi
  exit "$2"
}

# summary.txt: the figures in aligned columns under a header.
dc_write_summary() {
  local w1=6 w2=5 w3=4 name value goal result
  while IFS=$'\t' read -r name value goal result; do
    w1=$((${#name} > w1 ? ${#name} : w1))
    w2=$((${#value} > w2 ? ${#value} : w2))
    w3=$((${#goal} > w3 ? ${#goal} : w3))
  done <"$DC_FIGS"
  {
    printf "%-${w1}s  %-${w2}s  %-${w3}s  %s\n" figure value goal result
    while IFS=$'\t' read -r name value goal result; do
      printf "%-${w1}s  %-${w2}s  %-${w3}s  %s\n" "$name" "$value" "$goal" "$result"
    done <"$DC_FIGS"
  } >"$DC_OUT/summary.txt"
}

dc_on_exit() {
  local rc=$? n f fails
  trap - EXIT INT TERM HUP
  trap '' PIPE
  if [ -s "$DC_PLANNED" ]; then
    while IFS= read -r n; do
      if ! cut -f1 "$DC_FIGS" | grep -qxF -- "$n"; then
        printf '%s\t%s\t-\tSKIP\n' "$n" "not run (the check ended during '$(dc_field "$DC_STEP_TITLE")')" >>"$DC_FIGS"
      fi
    done <"$DC_PLANNED"
  fi
  fails=$(cut -f4 "$DC_FIGS" | grep -c '^FAIL$')
  printf '%s\t%s\t%s\t%s\n' "device-check" "exit $rc after $(dc_elapsed) s, $fails failed" \
    "exit 0 within ${DC_BUDGET} s" INFO >>"$DC_FIGS"
  dc_write_summary
  for f in "${DC_EXIT_FUNCS[@]}"; do "$f"; done
  echo
  echo "== summary ($DC_OUT/summary.txt)"
  cat "$DC_OUT/summary.txt"
  rm -f "$DC_PLANNED"
  if [ -n "${DC_TEE_PID:-}" ]; then # let the log's tee write the last lines before the exit
    exec >&- 2>&-
    wait "$DC_TEE_PID" 2>/dev/null
  fi
  exit "$rc"
}
