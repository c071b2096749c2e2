#!/usr/bin/env python3
"""Tests of scripts/compare.py on a real host-backend results folder
(tests/fixtures/ci-host, a bench/ci.suite run) and planted changes of it;
its breakdown of where a step lost its time (dpstools/tracediff.py) on a ddp
run with four buckets that dpscale records, and planted changes of it.
Usage: test_compare.py CASE [DPSCALE]; exit 0 pass, 1 fail."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("compare " + c, c, suite=NOSAN, timeout=300)
         for c in ("identical", "slowdown_20", "slowdown_3", "noisy", "memory", "refuse",
                   "bad_input", "drift", "utest", "versions", "recorded_by", "plot_python",
                   "breakdown_select")]
TESTS += [test("compare " + c, c, DPSCALE, suite=NOSAN, timeout=300)
          for c in ("breakdown_known", "breakdown_identical", "breakdown_ranks")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from helpers import (FIXTURES, PYTHON, SCRIPTS, copy_fixture, dpscale, dpsresults, edit, expect,
                     expect_exit, png_size, rows_of, run_case, script)
import compare  # scripts/compare.py (scripts/ is on PYTHONPATH)
from dpstools import stats

FIXTURE = os.path.join(FIXTURES, "ci-host")


def run(base, cur, *extra):
    return script("compare.py", base, cur, *extra, env={**os.environ, "GITHUB_STEP_SUMMARY": ""})


def copy(tmp, name="cur"):
    return copy_fixture("ci-host", tmp, name)


def rewrite(path, fn):
    """fn(i, row) edits the rows of a CSV file in place."""
    table = dpsresults.read_csv(path)
    for i, r in enumerate(table):
        fn(i, r)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=table.columns, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows(table)


def report(base, cur, tmp, *extra):
    js = os.path.join(tmp, "r.json")
    p = run(base, cur, "--json", js, *extra)
    rows = json.load(open(js))["rows"] if os.path.exists(js) else []
    return p, {(r["config"], r["metric"]): r["status"] for r in rows}


def first_config():
    return dpsresults.read_csv(os.path.join(FIXTURE, "runs.csv"))[0]["config_id"]


def scale_steps(folder, cid, factor):
    def fn(i, r):
        if r["config_id"] == cid:
            for k in r:
                if k.endswith("_ms") and r[k]:
                    r[k] = f"{float(r[k]) * factor:.4f}"
    rewrite(os.path.join(folder, "steps.csv"), fn)


def case_identical():
    with tempfile.TemporaryDirectory() as tmp:
        p, st = report(FIXTURE, copy(tmp), tmp)
        expect_exit(p, 0)
        expect(st and all(s == "SAME" for s in st.values()),
               f"not all SAME: {[k for k, s in st.items() if s != 'SAME']}")


def case_slowdown_20():
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        cid = first_config()
        scale_steps(cur, cid, 1.20)
        png = os.path.join(tmp, "r.png")
        p, st = report(FIXTURE, cur, tmp, "--junit", os.path.join(tmp, "j.xml"), "--plot", png)
        expect(p.returncode == 1, f"exit {p.returncode}, expected 1: {p.stdout}{p.stderr}")
        png_size(png)
        expect(os.path.getsize(png) > 10000, f"--plot: {png} is only {os.path.getsize(png)} B")
        bad = {k for k, s in st.items() if s == "REGRESSION"}
        expect((cid, "step_ms") in bad and (cid, "samples_per_s") in bad, f"regressions: {bad}")
        expect(all(k[0] == cid for k in bad), f"other configurations flagged: {bad}")
        xml = open(os.path.join(tmp, "j.xml")).read()
        expect(xml.count("<failure") == len(bad) and "REGRESSION" in xml, "JUnit failures")
        expect("**REGRESSION**" in p.stdout and "| Δ % |" in p.stdout, "Markdown table")


def case_slowdown_3():
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        scale_steps(cur, first_config(), 1.03)
        p, st = report(FIXTURE, cur, tmp)
        expect(p.returncode == 0, f"exit {p.returncode}: {p.stdout}")
        expect("REGRESSION" not in st.values(), f"statuses {st}")


def case_noisy():
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        cid = first_config()
        spread = [0.7, 1.3, 0.85, 1.15, 1.0]

        def fn(i, r):
            if r["config_id"] == cid:
                f = spread[int(r["step"]) % len(spread)]
                r["step_ms"] = f"{float(r['step_ms']) * f:.4f}"
        rewrite(os.path.join(cur, "steps.csv"), fn)
        p, st = report(FIXTURE, cur, tmp, "--junit", os.path.join(tmp, "j.xml"))
        expect(st[(cid, "step_ms")] == "NOISY", f"step_ms: {st[(cid, 'step_ms')]}")
        expect(p.returncode == 0, f"exit {p.returncode}")
        first = p.stdout.splitlines()[0]
        expect(first == "## dpscale performance comparison: INCONCLUSIVE: 1 of 4 "
                        "configuration(s) too noisy to judge (noise above 10 %)",
               f"a noisy step time, first line {first!r}")
        expect("<skipped" in open(os.path.join(tmp, "j.xml")).read(), "no <skipped> in JUnit")


def case_memory():
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        cid = first_config()

        def fn(i, r):
            if r["config_id"] == cid and r["device"] == "0":
                r["alloc_peak_bytes"] = str(int(int(r["alloc_peak_bytes"]) * 1.10))
        rewrite(os.path.join(cur, "devices.csv"), fn)
        p, st = report(FIXTURE, cur, tmp)
        expect(p.returncode == 1 and st[(cid, "alloc_peak_bytes[0]")] == "REGRESSION", f"{st}")
        p2, _ = report(FIXTURE, cur, tmp, "--warn-only")
        expect(p2.returncode == 0, "--warn-only did not exit 0")


def case_refuse():
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        meta = json.load(open(os.path.join(cur, "meta.json")))
        meta["devices"][0]["name"] = "NVIDIA H200"
        json.dump(meta, open(os.path.join(cur, "meta.json"), "w"))
        p = run(FIXTURE, cur)
        expect_exit(p, 2, "device differs", "--force")
        expect_exit(run(FIXTURE, cur, "--force"), 0)
    with tempfile.TemporaryDirectory() as tmp:  # another model under the same configuration id
        cur = copy(tmp)
        cid = first_config()

        def fn(i, r):
            if r["config_id"] == cid:
                r["params"] = str(int(r["params"]) + 1)
        rewrite(os.path.join(cur, "runs.csv"), fn)
        expect_exit(run(FIXTURE, cur), 2, f"{cid} has", "another model under the same name")


def case_bad_input():
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        runs = os.path.join(cur, "runs.csv")
        lines = open(runs).read().splitlines()
        cols = lines[0].split(",")
        k = cols.index("global_batch")
        open(runs, "w").write("\n".join(",".join(c for i, c in enumerate(l.split(",")) if i != k)
                                        for l in lines) + "\n")
        p = run(FIXTURE, cur)
        expect_exit(p, 2, "runs.csv:1: missing column(s) global_batch")
        shutil.copy(os.path.join(FIXTURE, "runs.csv"), runs)
        open(os.path.join(cur, "steps.csv"), "w").close()
        p = run(FIXTURE, cur)
        expect_exit(p, 2, "steps.csv:1: empty file")
        shutil.copy(os.path.join(FIXTURE, "steps.csv"), os.path.join(cur, "steps.csv"))

        def fn(i, r):
            if i == 4:
                r["step_ms"] = "fast"
        rewrite(os.path.join(cur, "steps.csv"), fn)
        p = run(FIXTURE, cur)
        expect_exit(p, 2, "steps.csv:6: column step_ms is not a number")
        shutil.copy(os.path.join(FIXTURE, "steps.csv"), os.path.join(cur, "steps.csv"))
        nowhere = os.path.join(tmp, "nowhere", "runs.csv")
        expect_exit(run(FIXTURE, nowhere), 2, f"{nowhere}: no such folder or file")
        # a typo beside real runs must not fall back to the folder above and pool them
        typo = os.path.join(tmp, "typo")
        expect_exit(run(typo, cur), 2, f"{typo}: no such folder or file")
        meta = os.path.join(FIXTURE, "meta.json")
        expect_exit(run(meta, cur), 2, f"{meta}: not a results folder")
        expect_exit(run(tmp, cur), 2, "the baseline holds the current run")


def case_drift():
    """A baseline of two runs 15 % apart: a 12 % slower run is within the
    machine's drift, though against one baseline run it is a regression."""
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "baseline")
        os.mkdir(base)
        shutil.copytree(FIXTURE, os.path.join(base, "run-1"))
        shutil.copytree(FIXTURE, os.path.join(base, "run-2"))
        cid = first_config()
        scale_steps(os.path.join(base, "run-2"), cid, 1.15)
        cur = copy(tmp)
        scale_steps(cur, cid, 1.12)
        p, st = report(os.path.join(base, "run-1"), cur, tmp)
        expect(st[(cid, "step_ms")] == "REGRESSION", f"one run: {st[(cid, 'step_ms')]}")
        p, st = report(base, cur, tmp)
        expect(st[(cid, "step_ms")] != "REGRESSION" and p.returncode == 0,
               f"two runs: {st[(cid, 'step_ms')]}, exit {p.returncode}")


def case_versions():
    """A folder with meta.json's version fields compares with one that has only
    the older one-line forms (the fixture's); no driver recorded as '' is
    the fixture's 'none'; a different driver refuses."""
    old = dpsresults.read_meta(FIXTURE)["versions"]
    want = {"driver": "none", "runtime": "13.0", "cublas": "13.1.0", "nccl": "2.28.9",
            "nccl_build": "22809", "blas": old["backend"], "conv": ""}
    expect(dpsresults.versions({"versions": old}) == want, f"older fields read as "
           f"{dpsresults.versions({'versions': old})}")
    on_cuda = {"backend": old["cuda"], "nccl_build": "22809"}
    expect(dpsresults.versions({"versions": on_cuda}) == {**want, "blas": ""},
           "the cuda backend's one-line form")
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        path = os.path.join(cur, "meta.json")
        meta = json.load(open(path))
        meta["versions"] = dict(want)
        json.dump(meta, open(path, "w"))
        p, st = report(FIXTURE, cur, tmp)
        expect_exit(p, 0)
        expect(st and all(s == "SAME" for s in st.values()), f"statuses {st}")
        meta["versions"]["driver"] = ""  # a build without CUDA: no driver, as 'none'
        json.dump(meta, open(path, "w"))
        expect_exit(report(FIXTURE, cur, tmp)[0], 0)
        meta["versions"]["driver"] = "580.65"
        json.dump(meta, open(path, "w"))
        expect_exit(run(FIXTURE, cur), 2, "driver differs: 'none' in the baseline, '580.65' now")


def set_describe(folder, describe):
    path = os.path.join(folder, "meta.json")
    meta = json.load(open(path))
    meta["git_describe"] = describe
    json.dump(meta, open(path, "w"))


def case_recorded_by():
    """A baseline recorded by another dpscale than the current run is named
    in the report and warned about (its differences may be any change's);
    the same version is not; paired rounds, whose base and head differ by
    design, are not warned about, and their first line says INCONCLUSIVE
    while rounds leave configurations undecided."""
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        was = f"dpscale 0.1.0 ({dpsresults.read_meta(FIXTURE)['git_describe']})"
        p = run(FIXTURE, cur, "--json", os.path.join(tmp, "same.json"))
        expect_exit(p, 0)
        first = p.stdout.splitlines()[0]
        expect(first == "## dpscale performance comparison: PASS", f"first line {first!r}")
        expect(f"on vm by {was};" in p.stdout and "recorded by" not in p.stdout,
               f"the same version:\n{p.stdout}")
        set_describe(cur, "0123abc")
        js = os.path.join(tmp, "r.json")
        p = run(FIXTURE, cur, "--json", js)
        expect_exit(p, 0)
        want = f"the baseline was recorded by {was}, the current run by dpscale 0.1.0 (0123abc)"
        expect(f"> warning: {want}" in p.stdout, f"no version warning:\n{p.stdout}")
        warned = json.load(open(js))["warnings"]
        expect(len(warned) == 1 and warned[0].startswith(want) and "--update-baseline" in warned[0],
               f"JSON warnings {warned}")
        base, head = os.path.join(tmp, "base"), os.path.join(tmp, "head")
        shutil.copytree(FIXTURE, os.path.join(base, "run-001"))
        shutil.copytree(cur, os.path.join(head, "run-001"))
        p = run(base, head, "--json", js, "--stopped", "--max-rounds 1 reached")
        expect_exit(p, 0)
        first = p.stdout.splitlines()[0]
        expect(first == "## dpscale performance comparison: INCONCLUSIVE: 4 of 4 "
                        "configuration(s) undecided after 1 round(s); stopped: --max-rounds 1 "
                        "reached", f"paired, one round: first line {first!r}")
        res = json.load(open(js))
        expect(res["verdict"] == "INCONCLUSIVE" and res["undecided"] == 4 and not res["warnings"],
               f"paired: verdict {res['verdict']}, warnings {res['warnings']}")


def case_plot_python():
    """--plot from a Python without matplotlib (/usr/bin/python3 -S: no
    site-packages) runs compare.py again under /usr/bin/python3, which
    draws; where that one has none either it refuses (exit 2) before
    writing anything and says what to install."""
    def imports_matplotlib(*flags):
        return subprocess.run([PYTHON, *flags, "-c", "import matplotlib"],
                              capture_output=True).returncode == 0
    if not imports_matplotlib():
        print(f"SKIP: {PYTHON} has no matplotlib (scripts/setup.sh installs python3-matplotlib)")
        return 77
    if imports_matplotlib("-S"):
        print(f"SKIP: {PYTHON} -S imports matplotlib: no Python without it to run from")
        return 77
    compare_py = os.path.join(SCRIPTS, "compare.py")
    with tempfile.TemporaryDirectory() as tmp:
        cur, png, js = copy(tmp), os.path.join(tmp, "r.png"), os.path.join(tmp, "r.json")
        env = {**os.environ, "GITHUB_STEP_SUMMARY": ""}
        env.pop(compare.REEXEC_ENV, None)
        cmd = [PYTHON, "-S", compare_py, FIXTURE, cur, "--plot", png, "--json", js]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        expect_exit(p, 0, f"has no matplotlib; running under {PYTHON}")
        png_size(png)
        expect(p.stdout.count("## dpscale performance comparison") == 1,
               f"the report written {p.stdout.count('## dpscale')} times:\n{p.stdout}")
        os.remove(js)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env={**env, compare.REEXEC_ENV: "1"})
        expect_exit(p, 2, "--plot needs matplotlib", "apt-get install python3-matplotlib")
        expect(not p.stdout and not os.path.exists(js), f"written before refusing:\n{p.stdout}")


def case_utest():
    mw = stats.mann_whitney
    # exact: complete separation of 3 and 3 is 1 of 20 arrangements each side
    u, p = mw([1, 2, 3], [4, 5, 6])
    expect(u == 0 and abs(p - 0.1) < 1e-12, f"{u} {p}")
    u, p = mw([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    expect(abs(p - 2 / 252) < 1e-12, f"{p}")  # 0.0079365..., as scipy's exact method
    # a textbook pair: U = 17 of 20, exact two-sided p = 14 / 126 = 0.1111
    u, p = mw([19, 22, 16, 29, 24], [20, 11, 17, 12])
    expect(u == 17 and abs(p - 14 / 126) < 1e-12, f"{u} {p}")
    u, p = mw([1, 2, 3], [1, 2, 3])
    expect(abs(p - 1.0) < 1e-12, f"identical samples: {p}")
    # large samples: the normal approximation agrees with the exact test
    a = [float(i) for i in range(0, 40, 2)]
    b = [float(i) + 3.5 for i in range(0, 40, 2)]
    _, p_exact = mw(a, b, exact_limit=20)
    _, p_norm = mw(a, b, exact_limit=0)
    expect(abs(p_exact - p_norm) < 0.15 * p_exact, f"exact {p_exact} vs normal {p_norm}")
    # ties: every value tied gives no evidence
    _, p = mw([5.0] * 10, [5.0] * 12)
    expect(p == 1.0, f"all ties: {p}")
    expect(abs(stats.noise([1, 2, 3, 4, 5]) - 2 / 3) < 1e-12, "noise = IQR / median")

# ---- the breakdown: where a slower step lost its time ----------------------------

# ddp on two ranks with four buckets (0.25 MiB caps), every timed step traced
BUCKETED_RUN = ("run", "--mode", "ddp", "--model", "small", "--gpus", "2", "--steps", "8",
                "--warmup", "1", "--first-bucket-mb", "0.25", "--bucket-mb", "0.25",
                "--trace-steps", "8")
STEP = re.compile(r"step ([0-9.]+) → ([0-9.]+) ms \(([-+][0-9.]+) ms")
LOST = re.compile(r"^lost most in: (\S+) \(\+([0-9.]+) ms on (rank|device) (\d+)\)", re.M)
GREW = re.compile(r"bucket (\d+)'s all-reduce grew most: \+([0-9.]+) ms \(([0-9.]+) → "
                  r"([0-9.]+) ms, rank (\d+)\)")
LATER = re.compile(r"bucket (\d+) became ready \+([0-9.]+) ms later \(([0-9.]+) → ([0-9.]+) "
                   r"ms after backward began, rank (\d+)\)")
ROUNDING = 0.0015  # the report's 3 decimals, of medians of 4-decimal cells


def bucketed_folder(binary, tmp):
    dpscale(binary, *BUCKETED_RUN, out=tmp, name="base", check_rc=0)
    base = os.path.join(tmp, "base")
    cid = rows_of(os.path.join(base, "runs.csv"))[0]["config_id"]
    return base, shutil.copytree(base, os.path.join(tmp, "cur")), cid


def breakdown_of(out, cid):
    """{step: (base, new, change), phases: [(phase, base, new, change, share, rank)],
    buckets: its line, lost: the lost-most line's match} of cid's breakdown."""
    expect(f"#### {cid}:" in out, f"no breakdown of {cid}:\n{out}")
    sec = out.split(f"#### {cid}:", 1)[1].split("\n#### ")[0]
    phases = []
    for line in sec.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 6 and cells[0] not in ("phase", "---"):
            share = None if cells[4] == "-" else float(cells[4].rstrip(" %"))
            phases.append((cells[0], float(cells[1]), float(cells[2]), float(cells[3]), share,
                           int(cells[5])))
    step = STEP.search(sec)
    expect(step, f"{cid}: no step line:\n{sec}")
    bucket = [l for l in sec.splitlines() if l.startswith("buckets")]
    return {"step": tuple(map(float, step.groups())), "phases": phases,
            "buckets": bucket[0] if bucket else None, "lost": LOST.search(sec), "text": sec}


def close(got, want, what, tol=ROUNDING):
    expect(abs(got - want) <= tol, f"{what}: {got}, expected {want:.4f} (within {tol})")


def step_medians(folder, cid):
    """The median step time: steps.csv's step_ms, one a step."""
    per = {r["step"]: float(r["step_ms"]) for r in rows_of(os.path.join(folder, "steps.csv"))
           if r["config_id"] == cid}
    return stats.median(list(per.values()))


def rank_medians(folder, cid, col, rank):
    """The median of a column of steps.csv on one rank (0 for a column the file lacks)."""
    return stats.median([float(r.get(col) or 0) for r in rows_of(os.path.join(folder, "steps.csv"))
                         if r["config_id"] == cid and r["rank"] == str(rank)])


def slow_rank1_backward(cur):
    """Rank 1's backward 1.5 times longer in steps.csv and phases.csv, the
    step time (and rank 1's own) longer by as much; bucket 2's all-reduce on
    rank 1 3 times longer, bucket 0 ready 0.25 ms later on it."""
    def steps(rows):
        extra = {}
        for r in rows:
            if r["rank"] == "1":
                old = float(r["backward_ms"])
                new = round(1.5 * old, 4)
                r["backward_ms"] = f"{new:.4f}"
                r["rank_step_ms"] = f"{float(r['rank_step_ms']) + new - old:.4f}"
                extra[r["step"]] = new - old
        for r in rows:
            r["step_ms"] = f"{float(r['step_ms']) + extra[r['step']]:.4f}"
        return rows

    def phases(rows):
        for r in rows:
            if r["device"] == "1" and r["phase"] == "backward":
                for c in ("median_ms", "mean_ms"):
                    r[c] = f"{1.5 * float(r[c]):.4f}"
        return rows

    def buckets(rows):
        for r in rows:
            if r["rank"] == "1" and r["bucket"] == "2":
                r["allreduce_ms"] = f"{3 * float(r['allreduce_ms']):.4f}"
            if r["rank"] == "1" and r["bucket"] == "0":
                r["ready_ms"] = f"{float(r['ready_ms']) + 0.25:.4f}"
        return rows
    edit(os.path.join(cur, "steps.csv"), steps)
    edit(os.path.join(cur, "phases.csv"), phases)
    edit(os.path.join(cur, "buckets.csv"), buckets)


def bucket_cell(folder, rank, bucket, col):
    return float(next(r[col] for r in rows_of(os.path.join(folder, "buckets.csv"))
                      if r["rank"] == str(rank) and r["bucket"] == str(bucket)))


def case_breakdown_known(binary):
    """Rank 1's backward 1.5 times longer: the breakdown gives the step's
    change, names backward first with its change on rank 1 and its share,
    every other phase unchanged, bucket 2's all-reduce as the one that grew
    and bucket 0 as ready later, and backward as where the step lost most,
    each number the one the planted change makes."""
    with tempfile.TemporaryDirectory() as tmp:
        base, cur, cid = bucketed_folder(binary, tmp)
        slow_rank1_backward(cur)
        js = os.path.join(tmp, "r.json")
        p = run(base, cur, "--breakdown", "all", "--json", js)
        expect(p.returncode in (0, 1), f"exit {p.returncode}: {p.stderr}")
        b = breakdown_of(p.stdout, cid)
        sb, sn = step_medians(base, cid), step_medians(cur, cid)
        close(b["step"][0], sb, "base step")
        close(b["step"][1], sn, "new step")
        close(b["step"][2], sn - sb, "step change")
        bb, bn = rank_medians(base, cid, "backward_ms", 1), rank_medians(cur, cid, "backward_ms", 1)
        name, was, now, change, share, rank = b["phases"][0]
        expect(name == "backward" and rank == 1, f"first phase {name} on rank {rank}, "
               f"expected backward on rank 1:\n{b['text']}")
        close(was, bb, "backward's base median on rank 1")
        close(now, bn, "backward's new median on rank 1")
        close(change, bn - bb, "backward's change")
        close(share, 100 * (bn - bb) / (sn - sb), "backward's share of the step's change", 0.6)
        others = [(r[0], r[3]) for r in b["phases"][1:] if r[3] != 0.0]
        expect(not others, f"phases changed that the test left alone: {others}")
        lost = b["lost"]
        expect(lost and lost.group(1) == "backward" and lost.group(4) == "1",
               f"lost most in: {lost and lost.group(0)}, expected backward on rank 1")
        close(float(lost.group(2)), bn - bb, "lost most in backward")
        grew, later = GREW.search(b["buckets"] or ""), LATER.search(b["buckets"] or "")
        a = bucket_cell(base, 1, 2, "allreduce_ms")
        expect(grew and grew.group(1) == "2" and grew.group(5) == "1",
               f"bucket line {b['buckets']!r}: expected bucket 2's all-reduce on rank 1")
        close(float(grew.group(2)), bucket_cell(cur, 1, 2, "allreduce_ms") - a, "bucket 2's growth")
        close(float(grew.group(3)), a, "bucket 2's base time")
        expect(later and later.group(1) == "0" and later.group(5) == "1",
               f"bucket line {b['buckets']!r}: expected bucket 0 ready later on rank 1")
        close(float(later.group(2)), 0.25, "bucket 0 ready later by")
        res = json.load(open(js))["breakdown"]
        expect(len(res) == 1 and res[0]["lost"]["phase"] == "backward"
               and res[0]["lost"]["rank"] == 1, f"JSON breakdown {res}")


def case_breakdown_identical(binary):
    """A folder against its copy: no phase changed, no collective grew, no
    loss named; by default (slower configurations) no breakdown at all. The
    fixture's dp configurations are by device and have no bucket line."""
    with tempfile.TemporaryDirectory() as tmp:
        base, cur, cid = bucketed_folder(binary, tmp)
        p = run(base, cur, "--breakdown", "all")
        expect_exit(p, 0)
        b = breakdown_of(p.stdout, cid)
        expect(b["step"][2] == 0.0 and b["phases"] and all(r[3] == 0.0 for r in b["phases"]),
               f"changes between identical folders:\n{b['text']}")
        expect("lost most in: nothing (no phase is slower)" in b["text"] and not b["lost"],
               f"a loss named between identical folders:\n{b['text']}")
        expect(b["buckets"] and b["buckets"].endswith(
            "no collective took longer or became ready later"), f"bucket line {b['buckets']!r}")
        p = run(base, cur)
        expect_exit(p, 0)
        expect("Where the time went" not in p.stdout, f"a breakdown by default:\n{p.stdout}")
        p = run(FIXTURE, copy(tmp, "fixture"), "--breakdown", "all")
        expect_exit(p, 0)
        for r in dpsresults.read_csv(os.path.join(FIXTURE, "runs.csv")):
            b = breakdown_of(p.stdout, r["config_id"])
            unit = "device" if r["mode"] == "dp" else "rank"
            expect(f"| {unit} |" in b["text"] and b["buckets"] is None and not b["lost"],
                   f"{r['config_id']}: by {unit}, no buckets, no loss:\n{b['text']}")


def case_breakdown_select():
    """By default only the configurations whose step time was judged slower
    are broken down; --breakdown all every one, none not one. 20 % slower
    everywhere: the phase that lost most is the one with the largest median
    (its 20 %), on its rank."""
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy(tmp)
        cid = first_config()
        scale_steps(cur, cid, 1.20)
        p = run(FIXTURE, cur)
        expect(p.returncode == 1 and p.stdout.count("\n#### ") == 1, f"breakdowns by default: "
               f"{p.stdout.count(chr(10) + '#### ')}, expected 1:\n{p.stdout}")
        b = breakdown_of(p.stdout, cid)
        runs = dpsresults.read_csv(os.path.join(FIXTURE, "runs.csv"))
        n = int(next(r["ngpus"] for r in runs if r["config_id"] == cid))
        want = max((rank_medians(cur, cid, ph + "_ms", k)
                    - rank_medians(FIXTURE, cid, ph + "_ms", k), ph, k)
                   for ph in dpsresults.PHASES if ph != "allreduce" for k in range(n))
        lost = b["lost"]
        expect(lost and (lost.group(1), int(lost.group(4))) == (want[1], want[2]),
               f"lost most in: {lost and lost.group(0)}, expected {want[1]} on {want[2]}")
        close(float(lost.group(2)), want[0], f"lost most in {want[1]}")
        p = run(FIXTURE, cur, "--breakdown", "all")
        expect(p.stdout.count("\n#### ") == len(runs), f"--breakdown all: "
               f"{p.stdout.count(chr(10) + '#### ')} breakdowns, expected {len(runs)}")
        p = run(FIXTURE, cur, "--breakdown", "none")
        expect("Where the time went" not in p.stdout, "--breakdown none broke down")


def drop_rank1(folder, cid):
    """The configuration's rank 1 taken out of every file, as if it ran on one."""
    for name, col in (("steps.csv", "rank"), ("devices.csv", "device"), ("phases.csv", "device"),
                      ("memory.csv", "device"), ("buckets.csv", "rank")):
        edit(os.path.join(folder, name), lambda rows: [r for r in rows if r[col] != "1"])

    def runs(rows):
        for r in rows:
            r["ngpus"], r["devices"] = "1", "0"
        return rows
    edit(os.path.join(folder, "runs.csv"), runs)


def case_breakdown_ranks(binary):
    """A current run with one rank of the baseline's two: said, and compared
    on rank 0 (its forward 1.2 times longer, named); without buckets.csv on
    one side the bucket line says so."""
    with tempfile.TemporaryDirectory() as tmp:
        base, cur, cid = bucketed_folder(binary, tmp)
        drop_rank1(cur, cid)

        def forward(rows):
            for r in rows:
                r["forward_ms"] = f"{1.2 * float(r['forward_ms']):.4f}"
            return rows
        edit(os.path.join(cur, "steps.csv"), forward)
        p = run(base, cur, "--breakdown", "all")
        expect(p.returncode in (0, 1), f"exit {p.returncode}: {p.stderr}")
        b = breakdown_of(p.stdout, cid)
        expect("rank counts differ: 2 in the baseline, 1 now; phases compared on the ranks both "
               "have (0)" in b["text"], f"no note on the ranks:\n{b['text']}")
        expect(all(r[5] == 0 for r in b["phases"]), f"a rank besides 0: {b['phases']}")
        want = rank_medians(cur, cid, "forward_ms", 0) - rank_medians(base, cid, "forward_ms", 0)
        lost = b["lost"]
        expect(lost and lost.group(1) == "forward" and lost.group(4) == "0",
               f"lost most in: {lost and lost.group(0)}, expected forward on rank 0")
        close(float(lost.group(2)), want, "lost most in forward")
        os.remove(os.path.join(cur, "buckets.csv"))
        p = run(base, cur, "--breakdown", "all")
        b = breakdown_of(p.stdout, cid)
        expect(b["buckets"] and b["buckets"].startswith(
            "buckets: only the baseline has buckets.csv rows for this configuration (4 "),
            f"bucket line without the current run's buckets.csv: {b['buckets']!r}")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[1], CASES[sys.argv[1]], *sys.argv[2:]))
