#!/usr/bin/env python3
"""Figures of scripts/device-check.sh, read from dpscale's results files
(runs.csv, links.csv) and from tool logs. Each command prints figure lines,
NAME<TAB>VALUE<TAB>GOAL<TAB>RESULT with RESULT PASS, FAIL or INFO, which
device-check-lib.sh's dc_figures_from records; a missing or unreadable
file is a FAIL line naming the file, never a crash.

usage: device_check_summary.py check FIG FOLDER
       device_check_summary.py strict FIG FOLDER EXIT_STATUS LOG [FOLDER EXIT_STATUS LOG...]
       device_check_summary.py sweep FIG FOLDER EXPECTED
       device_check_summary.py suite FIG PLAN FOLDER EXIT_STATUS
       device_check_summary.py gemm FIG FOLDER MIN_RATIO
       device_check_summary.py torch FIG DPSCALE_FOLDER TORCH_FOLDER MAX_RATIO
       device_check_summary.py cost FIG MAX_FRACTION WITH_FOLDER... -- WITHOUT_FOLDER...
       device_check_summary.py links PREFIX DPSCALE_FOLDER TORCH_CSV MAX_FRACTION METHOD:SRC:DST...
       device_check_summary.py sanitizer FIG LOG EXIT_STATUS RUN_FOLDER
       device_check_summary.py ncu FIG CAPTURE_LOG IMPORT_LOG RANGE
       device_check_summary.py field FOLDER COLUMN    (prints the last run's COLUMN)
       device_check_summary.py goals SUMMARY_TSV      (prints the goals block of summary.txt)
"""
import csv
import json
import os
import re
import statistics
import sys

from dpstools import sanitizer_log
from dpstools.figures import Missing, figure_line


def line(name, value, goal, result):
    print(figure_line(name, value, goal, result))


def rows(path):
    if not os.path.exists(path):
        raise Missing(f"no {path} (the run wrote no results: see device-check.log)")
    with open(path, newline="") as f:
        out = list(csv.DictReader(f))
    if not out:
        raise Missing(f"{path} has no rows")
    return out


def last_run(folder):
    return rows(os.path.join(folder, "runs.csv"))[-1]


def num(row, col, path="runs.csv"):
    try:
        v = float(row[col])
    except (KeyError, TypeError, ValueError):
        raise Missing(f"{path}: column {col} is '{row.get(col)}', not a number "
                      f"(status {row.get('status')}: {row.get('error') or 'no error given'})")
    return v


def pos(row, col, path="runs.csv"):
    """A column that divides: a number above zero."""
    v = num(row, col, path)
    if not v > 0:
        raise Missing(f"{path}: column {col} is {v}, not above zero")
    return v


def verdict(ok):
    return "PASS" if ok else "FAIL"


def cmd_check(fig, folder):
    r = last_run(folder)
    diff = r.get("check_max_rel_diff") or "-"
    ok = r["status"] == "ok" and r["check"] == "pass"
    err = f" ({r['error']})" if r.get("error") else ""
    line(fig, f"status={r['status']}{err} check={r['check']} max_rel_diff={diff}",
         "status ok, check pass", verdict(ok))


def strict_run(folder, rc, log):
    """One --strict run on the host backend: '' when it ended ok with --check
    passing and meta.json saying strict, else what went wrong."""
    name = os.path.basename(folder.rstrip("/"))
    meta = os.path.join(folder, "meta.json")
    try:
        with open(meta) as f:
            strict = json.load(f).get("strict") is True
    except (OSError, ValueError) as e:
        return f"{name}: exit {rc}, no readable {meta} ({e})"
    if not strict:
        return f"{name}: {meta} does not record \"strict\": true (was --strict given?)"
    path = os.path.join(folder, "runs.csv")
    r = rows(path)[-1] if os.path.exists(path) else None
    if rc == "0" and r and r["status"] == "ok" and r["check"] == "pass":
        return ""
    said = ""
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            said = next((ln.strip() for ln in f if ln.startswith("dpscale")), "")
    got = f"status {r['status']}, check {r['check']}" if r else "no runs.csv row"
    return f"{name}: exit {rc}, {got}" + (f": {said}" if said else f" (see {log})")


def cmd_strict(fig, *triples):
    """Runs under --strict on the host backend, each FOLDER EXIT_STATUS LOG:
    every one exits 0, ends ok with --check passing, and meta.json says strict."""
    if not triples or len(triples) % 3:
        raise Missing(f"strict takes FOLDER EXIT_STATUS LOG triples, got {len(triples)} argument(s)")
    runs = [triples[i:i + 3] for i in range(0, len(triples), 3)]
    bad = [b for b in (strict_run(*t) for t in runs) if b]
    names = ", ".join(os.path.basename(t[0].rstrip("/")) for t in runs)
    value = "; ".join(bad) if bad else f"{len(runs)}/{len(runs)} ok, check pass, strict: {names}"
    line(fig, value, "every run exits 0, status ok, check pass, strict", verdict(not bad))


def cmd_sweep(fig, folder, expected):
    expected = int(expected)
    runs = rows(os.path.join(folder, "runs.csv"))
    ok = sum(r["status"] == "ok" for r in runs)
    bad = [f"{r['config_id']}: {r['status']}" for r in runs if r["status"] != "ok"]
    links_path = os.path.join(folder, "links.csv")
    links = rows(links_path) if os.path.exists(links_path) else []
    links_ok = bool(links) and all(x["status"] == "ok" for x in links)
    value = f"{ok}/{max(len(runs), expected)} ok; links.csv {len(links)} rows" + (
        "" if links_ok else " (missing or not ok)") + (f"; {', '.join(bad)}" if bad else "")
    line(fig, value, f"{expected}/{expected} ok, links measured",
         verdict(ok == expected == len(runs) and links_ok))


def planned(plan):
    """The configuration ids a sweep's --dry-run listed (its lines "  N  ID  host ...")."""
    if not os.path.exists(plan):
        raise Missing(f"no {plan} (the sweep's --dry-run did not run)")
    with open(plan, errors="replace") as f:
        text = f.read()
    ids = re.findall(r"^\s*\d+\s+(\S+)\s+host ", text, re.M)
    if not ids:
        last = (text.strip().splitlines() or ["nothing printed"])[-1]
        raise Missing(f"{plan} lists no configuration: {last}")
    return ids


def cmd_suite(fig, plan, folder, rc):
    """Every configuration a suite's sweep planned (PLAN, its --dry-run) has
    a row in FOLDER/runs.csv with status ok, and the sweep exited 0."""
    want = planned(plan)
    path = os.path.join(folder, "runs.csv")
    got = {r["config_id"]: r for r in rows(path)} if os.path.exists(path) else {}
    bad = []
    for cid in want:
        r = got.get(cid)
        if r is None:
            bad.append(f"{cid}: no row (the sweep ended before it)")
        elif r["status"] != "ok":
            bad.append(f"{cid}: {r['status']} ({r.get('error') or 'no error given'})")
    ok = len(want) - len(bad)
    value = f"{ok}/{len(want)} ok, exit {rc}: " + ("; ".join(bad) if bad else ", ".join(want))
    fix = f"; {folder}/runs.csv and device-check.log hold each one's error" if bad else ""
    line(fig, value + fix, "every configuration ends ok, exit 0",
         verdict(not bad and int(rc) == 0))


def cmd_gemm(fig, folder, goal):
    r = last_run(folder)
    model, gemm = num(r, "model_tflops"), pos(r, "gemm_ref_tflops")
    ratio = model / gemm
    line(fig, f"{ratio:.3f} ({r['model']} {r['precision']}: model {model:.4g} / GEMMs alone "
              f"{gemm:.4g} TFLOP/s)", f">= {goal}", verdict(r["status"] == "ok" and ratio >= float(goal)))


def cmd_torch(fig, dps_folder, torch_folder, goal):
    d, t = last_run(dps_folder), last_run(torch_folder)
    dm, tm = num(d, "step_ms_median"), pos(t, "step_ms_median")
    ratio = dm / tm
    line(fig, f"{ratio:.3f} ({d['model']} {d['precision']} batch {d['global_batch']}: dpscale "
              f"{dm:.3f} ms, torch {tm:.3f} ms; loss {d['loss_last']} vs {t['loss_last']})",
         f"<= {goal}", verdict(d["status"] == "ok" and t["status"] == "ok" and ratio <= float(goal)))


def cmd_cost(fig, goal, *folders):
    if "--" not in folders:
        raise Missing("cost: expected WITH_FOLDER... -- WITHOUT_FOLDER...")
    k = folders.index("--")
    with_, without = folders[:k], folders[k + 1:]
    if not with_ or not without:
        raise Missing("cost: needs at least one folder on each side of --")
    w = [num(last_run(f), "step_ms_median") for f in with_]
    wo = [pos(last_run(f), "step_ms_median") for f in without]
    a, b = statistics.mean(w), statistics.mean(wo)
    cost = (a - b) / b
    each = ", ".join(f"{x:.3f}" for x in w) + " / " + ", ".join(f"{x:.3f}" for x in wo)
    line(fig, f"{cost * 100:+.2f} % (with {a:.3f} ms, without {b:.3f} ms; runs {each})",
         f"<= {float(goal) * 100:g} %", verdict(cost <= float(goal)))


def same_size(rows, key, theirs):
    """links.csv's row of path key (method, src, dst) at the size of theirs (PyTorch's
    row), or at its largest size when theirs has none or that size is not measured."""
    mine = [r for r in rows if (r["method"], r["src"], r["dst"]) == key]
    size = lambda r: int(r["bytes"]) if r.get("bytes", "").isdigit() else 0  # noqa: E731
    want = (theirs or {}).get("bytes")
    return next((r for r in mine if r.get("bytes") == want), None) or \
        max(mine, key=size, default=None)


def cmd_links(prefix, dps_folder, torch_csv, goal, *paths):
    """One figure per PATH (METHOD:SRC:DST), each FAIL with the reason when
    a file or its row is missing."""
    want = f"within {float(goal) * 100:g} %"
    names = [f"{prefix} {m} {s}->{d}" for m, s, d in (p.split(":") for p in paths)]
    try:
        mine = rows(os.path.join(dps_folder, "links.csv"))
        theirs = rows(torch_csv)
    except Missing as e:
        for name in names:
            line(name, f"no figure: {e}", want, "FAIL")
        return
    for name, path in zip(names, paths):
        key = tuple(path.split(":"))  # method, src, dst
        t = next((r for r in theirs if (r["method"], r["src"], r["dst"]) == key), None)
        d = same_size(mine, key, t)
        if d is None or t is None:
            line(name, f"no row for {path} in {'links.csv' if d is None else torch_csv}", want,
                 "FAIL")
            continue
        try:
            a, b = num(d, "bw_gbps", "links.csv"), pos(t, "bw_gbps", torch_csv)
        except Missing as e:
            line(name, f"no figure: {e}", want, "FAIL")
            continue
        diff = (a - b) / b
        line(name, f"{diff * 100:+.1f} % (dpscale {a:.2f} GB/s, torch {b:.2f} GB/s)", want,
             verdict(d["status"] == "ok" and abs(diff) <= float(goal)))


# compute-sanitizer's exit status with --error-exitcode 9 when it reported errors
SANITIZER_ERRORS_RC = 9


def cmd_sanitizer(fig, log, rc, folder):
    """dpscale's run under memcheck: no error of dpscale's own (NCCL's CUDA API
    errors, its probing of its kernels, are counted apart and reported), the
    run ok in FOLDER/runs.csv, and the tool's exit 0, or 9 when all it reported
    was NCCL's."""
    if not os.path.exists(log):
        raise Missing(f"no {log}")
    with open(log, errors="replace") as f:
        got = sanitizer_log.parse(f.read())
    rc = int(rc)
    goal = (f"0 errors of dpscale's own, exit 0 (or {SANITIZER_ERRORS_RC}: NCCL's errors alone), "
            f"status ok")
    value = (f"{got.own} errors of dpscale's own ({got.nccl_api} CUDA API errors inside NCCL, "
             f"not counted), exit {rc}")
    why = sanitizer_failure(got, rc, last_run(folder))
    line(fig, value + (f"; {why}" if why else ""), goal, verdict(not why))


def sanitizer_failure(got, rc, run):
    """What fails the memcheck figure, with what to do; "" when nothing does."""
    if not got.processes:
        return "no ERROR SUMMARY: the sanitizer did not report (see the log)"
    if got.own:
        first = f" the first: {got.first_own}" if got.first_own else " (past the print limit)"
        return (f"{got.own_api} CUDA API and {got.memory} memory errors printed,{first}; "
                f"the raw log has each with its backtrace")
    if rc not in (0, SANITIZER_ERRORS_RC) or (rc and not got.total):
        return f"the run or the tool failed (exit {rc}): see the log's last lines"
    if run["status"] != "ok":
        return f"dpscale's run ended {run['status']}: {run.get('error') or 'no error given'}"
    return ""


def cmd_ncu(fig, capture_log, import_log, range_name):
    missing = [p for p in (capture_log, import_log) if not os.path.exists(p)]
    if missing:
        line(f"{fig} kernels", f"no figure: no {missing[0]}", ">= 1, no ncu error", "FAIL")
        line(f"{fig} report", f"no figure: no {missing[0]}", "range named", "FAIL")
        return
    cap = open(capture_log, errors="replace").read()
    imp = open(import_log, errors="replace").read()
    profiled = len(re.findall(r"==PROF== Profiling ", cap))
    errors = re.findall(r"==ERROR==.*", cap)
    named = re.search(rf"\b{re.escape(range_name)}\b", imp) is not None
    line(f"{fig} kernels", f"{profiled} profiled under the NVTX include filter"
         + (f"; {len(errors)} ncu error(s), the first: {errors[0]}" if errors else ""),
         ">= 1, no ncu error", verdict(profiled >= 1 and not errors))
    line(f"{fig} report", ("the report names range '%s'" if named else
                           "the report does not name range '%s'") % range_name,
         "range named", verdict(named))


# The goals the check's figures serve, each with the figures (by name) that measure it.
GOALS = [("the stream and memory contracts hold on the CPU (host backend, --strict)",
          r"strict mode "),
         ("every configuration of the main job ends ok", r"main job "),
         ("0 memcheck errors of dpscale's own", r"memcheck "),
         ("every loss and check PASS", r"(loss|check|gpu tests)"),
         ("memory within 10 % of PyTorch's on medium and gpt2-mlp",
          r"memory (dp|ddp) (medium|gpt2-mlp) "),
         ("the loss phase no slower than PyTorch's (gpt2-mlp bf16)", r"phase loss "),
         ("model TFLOP/s at least 0.85 x the GEMMs alone (gpt2-mlp bf16)", r"TFLOP/s "),
         ("the step at most 1.05 x PyTorch's real modules' (resnet50, gpt2, bert-large)",
          r"step real "),
         ("device 0's peak within 10 % of the real modules' max_memory_allocated",
          r"memory real ")]


def goal_state(results):
    """met, NOT MET (a figure failed), partly measured (some skipped, none
    failed) or not measured (none passed or failed)."""
    if "FAIL" in results:
        return "NOT MET"
    if "PASS" not in results:
        return "not measured"
    return "partly measured" if "SKIP" in results else "met"


def cmd_goals(tsv):
    """The goals block under summary.txt's figures, read from summary.tsv."""
    if not os.path.exists(tsv):
        raise Missing(f"no {tsv}")
    with open(tsv, errors="replace") as f:
        figs = [ln.rstrip("\n").split("\t") for ln in f if ln.count("\t") == 3]
    print("goals (met: every figure of the goal passed)")
    for text, pattern in GOALS:
        mine = [(name, result) for name, _, _, result in figs if re.match(pattern, name)]
        results = [r for _, r in mine]
        failed = [name for name, r in mine if r == "FAIL"]
        counts = ", ".join(f"{results.count(r)} {r}" for r in ("PASS", "FAIL", "SKIP")
                           if r in results) or "no figure"
        print(f"  {goal_state(results):<15}  {text}: {counts}"
              + (f" ({'; '.join(failed)})" if failed else ""))


def cmd_field(folder, col):
    print(last_run(folder).get(col, ""))


COMMANDS = {"check": (cmd_check, 2, 2), "strict": (cmd_strict, 4, None), "sweep": (cmd_sweep, 3, 3), "suite": (cmd_suite, 4, 4),
            "gemm": (cmd_gemm, 3, 3), "torch": (cmd_torch, 4, 4), "cost": (cmd_cost, 5, None),
            "links": (cmd_links, 5, None), "sanitizer": (cmd_sanitizer, 4, 4),
            "ncu": (cmd_ncu, 4, 4), "field": (cmd_field, 2, 2), "goals": (cmd_goals, 1, 1)}


def main(argv):
    if len(argv) < 2 or argv[1] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    fn, lo, hi = COMMANDS[argv[1]]
    args = argv[2:]
    if len(args) < lo or (hi is not None and len(args) > hi):
        want = f"{lo}" if lo == hi else f"at least {lo}"
        print(f"device_check_summary.py {argv[1]}: expected {want} arguments, got {len(args)}\n"
              f"{__doc__.strip()}", file=sys.stderr)
        return 2
    try:
        fn(*args)
    except Missing as e:
        if argv[1] in ("field", "goals"):
            print(f"device_check_summary.py {argv[1]}: {e}", file=sys.stderr)
            return 1
        line(args[0], f"no figure: {e}", "-", "FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
