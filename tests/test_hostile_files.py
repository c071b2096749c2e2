#!/usr/bin/env python3
"""What dpscale writes, its readers take, and what they take, it writes:
text cells that stay UTF-8 without control characters whatever the error
says; predictions at the ends of predict's ranges that their reader reads;
cells dpscale never writes refused by the Python readers and by predict
--from alike, and only those; runs.csv's five status words; a foreign
links.csv or allreduce.csv refused before anything is measured; a suite's
value beyond the limits refused as on the command line; a FIFO, a device or
a file past the readers' size limit refused at once; the readers' peak
memory on a folder of a million steps.csv rows under the bound
docs/results.md states; --resume over 100 000 rows in linear time.
Usage: test_hostile_files.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skipped."""
from listing import DPSCALE, exit_if_listing, test

# what dpscale writes its readers take, and only that: text cells, predict's ranges, cells
# dpscale never writes (Python readers and predict --from alike), status words, foreign
# headers, a suite's limits, FIFOs and files past the size limit; the readers' peak memory
# on 1M steps.csv rows (alone: measured) and --resume over 100 000 rows (timed)
TESTS = [test("hostile " + c.replace("_", " "), DPSCALE, c, suite="scripts", timeout=300,
              parallel=c not in ("memory", "resume_rows"))
         for c in ("text_cells", "predict_ranges", "strict_cells", "from_cells", "status_words",
                   "foreign_headers", "suite_limit", "fifo", "big_files", "memory", "resume_rows")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from helpers import (FIXTURES, PYTHON, SCRIPTS, copy_fixture, dpscale, dpsresults, expect,
                     expect_exit, run_case, script, write)

NO_SUMMARY = {**os.environ, "GITHUB_STEP_SUMMARY": ""}
CID = "dp-small-fp32-sgd-g2-b32"  # a configuration of the ci-host fixture on two devices
# Cells dpscale never writes where it writes a whole number, and what int() or float() take.
LENIENT = ["２", "٢", " 2", "2 ", "+2", "2e0", "2.0", "2_0", "02", "0x2", "2.", ".5", "1e1"]
# The magnitudes of the readers' range, both sides of each end.
EDGES = ["18446744073709551615", "18446744073709551616", "0.000000001", "0.0000000001",
         "0.0000000000", "1.1234567890", "-0", "-0.000"]
# The peak memory docs/results.md states for the readers of a 1M-row folder, with room.
PEAK_BOUND_MIB = 256


def set_cells(path, col, value, match=None):
    """Sets column col of every row (of config_id `match`, when given)."""
    with open(path, newline="") as f:
        header, *rows = list(csv.reader(f))
    for r in rows:
        if match is None or r[0] == match:
            r[header.index(col)] = value
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header] + rows)


def refused_by_readers(folder, needle, tools=("compare.py", "plot.py")):
    """Why compare.py and plot.py (those of tools) do not both refuse folder
    (exit 2, one line holding needle), or None."""
    with tempfile.TemporaryDirectory() as tmp:
        for tool, args in (("compare.py", [folder, folder]),
                           ("plot.py", [folder, "--out", tmp])):
            if tool not in tools:
                continue
            try:
                p = script(tool, *args, env=NO_SUMMARY, timeout=60)
            except subprocess.TimeoutExpired:
                return f"{tool}: still running after 60 s"
            if p.returncode != 2 or needle not in p.stderr or "Traceback" in p.stderr:
                return f"{tool}: exit {p.returncode}, expected 2 with {needle!r}:\n{p.stderr}"
    return None


# ---- text cells -----------------------------------------------------------------

def case_text_cells(binary):
    """An error whose text is not UTF-8 and holds terminal escapes and line
    ends (a path given to --save-params) lands in runs.csv as UTF-8 with no
    control character, and on the terminal without the escape."""
    with tempfile.TemporaryDirectory() as out:
        bad = os.fsencode(out) + b"/none/\xff\xfe\x1b[31mred\x1b[0m\nline\x07\x9b.npy"
        cmd = [binary, "run", "--gpus", "1", "--model", "tiny", "--steps", "2", "--backend",
               "host", "--out", out, "--name", "t", b"--save-params", bad]
        p = subprocess.run(cmd, capture_output=True, timeout=120)
        expect(p.returncode == 1,
               f"exit {p.returncode}, expected 1:\n{p.stderr.decode(errors='replace')}")
        raw = open(os.path.join(out, "t", "runs.csv"), "rb").read()
        text = raw.decode("utf-8", errors="replace")
        expect(text.encode() == raw, f"runs.csv is not UTF-8: {raw[-400:]!r}")
        error = next(csv.DictReader(text.splitlines()))["error"]
        controls = [c for c in error if ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0]
        expect(not controls, f"runs.csv's error holds control characters {controls}: {error!r}")
        expect("\ufffd" in error and "red" in error and "line" in error,
               f"runs.csv's error lost its text: {error!r}")
        expect(b"\x1b" not in p.stdout, f"the table shows the escape: {p.stdout[-300:]!r}")
        runs = dpsresults.read_csv(os.path.join(out, "t", "runs.csv"), ["error"])
        expect(runs[0]["error"] == error, "the strict reader reads another error")


# ---- predict's ranges -----------------------------------------------------------

def case_predict_ranges(binary):
    """A machine at the ends of predict's ranges (a bandwidth of 1e-9 or
    1e-300 GB/s, a calibration of 1e-300): exit 0 and a predictions.csv that
    read_predictions takes, a figure it cannot hold skipped with a note."""
    workload = os.path.join(SCRIPTS, "..", "bench", "predict", "resnet50-b32.workload")
    with tempfile.TemporaryDirectory() as out:
        calib = write(os.path.join(out, "c.calib"), "bus_eff = 1e-300\noverlap_eff = 1e-300\n")
        for name, bw, extra in (("slow", "1e-9", []), ("tiny", "1e-300", []),
                                ("fast", "1e6", []), ("calib", "100", ["--calibration", calib])):
            machine = write(os.path.join(out, name + ".machine"),
                            f"name = {name}\ngpus_per_node = 8\nintra_busbw_gbps = {bw}\n")
            p = dpscale(binary, "predict", "--machine", machine, "--workload", workload, "--gpus",
                        "1,2,8", *extra, out=out, name=name, backend=None)
            expect_exit(p, 0)
            table = dpsresults.read_predictions(os.path.join(out, name, "predictions.csv"))
            for r in table:
                expect(r["status"] != "skipped" or "beyond what predictions.csv holds" in r["note"]
                       or int(r["ngpus"]) == 1, f"{name}: a skipped row without its why: {r}")


# ---- cells ----------------------------------------------------------------------

def case_strict_cells(binary):
    """Every cell dpscale never writes is refused by compare.py and plot.py
    alike, naming file:line and the column, in whole numbers (ngpus) and
    decimals (samples_per_s); what it writes at the range's ends is read."""
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        decimals = [v for v in LENIENT if v != "2.0"] + EDGES[1:5:2]
        for col, values in (("ngpus", LENIENT), ("samples_per_s", decimals)):
            for value in values:
                folder = os.path.join(tmp, f"m{len(os.listdir(tmp))}")
                shutil.copytree(os.path.join(FIXTURES, "ci-host"), folder)
                set_cells(os.path.join(folder, "runs.csv"), col, value, CID)
                why = refused_by_readers(folder, f"runs.csv:3: column {col}")
                if why:
                    bad.append(f"{col}={value!r}: {why}")
        for value in ("0.000000001", "1234.5", "-0.000"):
            kind = dpsresults.KINDS["runs.csv"]["loss_last"]
            expect(kind.problem(value) is None, f"loss_last {value!r}: {kind.problem(value)}")
    expect(not bad, f"{len(bad)} cells not refused:\n" + "\n".join(bad))


def predict_from(binary, folder, out):
    return dpscale(binary, "predict", "--from", folder, "--gpus", "1,2", out=out, name=None,
                   backend=None, timeout=60)


def case_from_cells(binary):
    """predict --from refuses exactly the cells the Python readers refuse:
    each cell of LENIENT and EDGES in a whole-number column (runs.csv's
    ngpus, memory.csv's bytes_at_peak) and a decimal one (phases.csv's
    median_ms), each verdict compared; an intact folder is read by both."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--gpus", "1,2", "--model", "tiny", "--steps", "5", out=out,
                name="cal", check_rc=0)
        dpscale(binary, "comm-bench", "--gpus", "2", "--sizes", "64K,1M", out=out, name="cal",
                backend=None, check_rc=0)
        base = os.path.join(out, "cal")
        expect_exit(predict_from(binary, base, out), 0)
        disagree = []
        for name, col, values in (("runs.csv", "ngpus", LENIENT + EDGES),
                                  ("memory.csv", "bytes_at_peak", LENIENT + EDGES),
                                  ("phases.csv", "median_ms", LENIENT + EDGES)):
            kind = dpsresults.KINDS[name][col]
            for value in values:
                folder = os.path.join(out, "m")
                shutil.rmtree(folder, ignore_errors=True)
                shutil.copytree(base, folder)
                set_cells(os.path.join(folder, name), col, value)
                p = predict_from(binary, folder, out)
                c_refuses = p.returncode == 2 and f"column {col}" in p.stderr
                if c_refuses != (kind.problem(value) is not None):
                    disagree.append(f"{name} {col}={value!r}: Python says {kind.problem(value)}, "
                                    f"predict --from exit {p.returncode}: {p.stderr.strip()}")
        expect(not disagree, f"{len(disagree)} cells read differently:\n" + "\n".join(disagree))


def case_status_words(binary):
    """runs.csv's status is one of ok, oom, error, timeout, skipped: a
    configuration refused while it ran (its trace folder a file) is an
    error, and the readers refuse any other word ('usage')."""
    with tempfile.TemporaryDirectory() as out:
        os.makedirs(os.path.join(out, "t"))
        write(os.path.join(out, "t", "trace"), "")
        dpscale(binary, "run", "--gpus", "1", "--model", "tiny", "--steps", "3", out=out)
        runs = dpsresults.read_csv(os.path.join(out, "t", "runs.csv"), ["status"])
        expect([r["status"] for r in runs] == ["error"], f"status {[r['status'] for r in runs]}")
        folder = copy_fixture("ci-host", out, "usage")
        set_cells(os.path.join(folder, "runs.csv"), "status", "usage", CID)
        why = refused_by_readers(folder, "runs.csv:3: column status is not one of ok, oom, "
                                         "error, timeout, skipped")
        expect(not why, why)


# ---- files ----------------------------------------------------------------------

def case_foreign_headers(binary):
    """A links.csv or allreduce.csv of another header: sweep, links and
    comm-bench refuse the folder (exit 2, naming the file) before measuring
    or running anything."""
    with tempfile.TemporaryDirectory() as out:
        for name, file, cmd in (("s", "links.csv", ["sweep", "--mode", "dp", "--gpus", "1",
                                                    "--model", "tiny", "--steps", "2"]),
                                ("n", "links.csv", ["sweep", "--mode", "dp", "--gpus", "1",
                                                    "--model", "tiny", "--steps", "2",
                                                    "--no-links"]),
                                ("r", "allreduce.csv", ["run", "--gpus", "1", "--model", "tiny",
                                                        "--steps", "2"]),
                                ("l", "links.csv", ["links", "--gpus", "2"]),
                                ("c", "allreduce.csv", ["comm-bench", "--gpus", "2", "--sizes",
                                                        "64K"])):
            os.makedirs(os.path.join(out, name))
            write(os.path.join(out, name, file), "bogus,header\n")
            p = dpscale(binary, *cmd, out=out, name=name,
                        backend=None if cmd[0] == "comm-bench" else "host")
            expect_exit(p, 2, f"{name}/{file}: its header differs")
            left = sorted(os.listdir(os.path.join(out, name)))
            expect(not set(left) & {"runs.csv", "steps.csv"} and "65536" not in p.stdout,
                   f"{' '.join(cmd)}: ran before refusing: {left}\n{p.stdout}")


def case_suite_limit(binary):
    """A suite's batch beyond the 2^40 limit is refused as the same values
    on the command line are: exit 2, naming the suite, no folder written."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"),
                      "models = tiny\nbatch_per_gpu = 16777216\ngpus = 64\n")
        p = dpscale(binary, "sweep", suite, "--host-devices", "64", "--no-links", out=out,
                    name="s")
        expect_exit(p, 2, "s.suite: configuration", "2^40")
        expect(not os.path.exists(os.path.join(out, "s")), "the suite's folder was written")
        p = dpscale(binary, "sweep", "--model", "tiny", "--batch-per-gpu", "16777216", "--gpus",
                    "64", "--host-devices", "64", "--no-links", out=out, name="c")
        expect_exit(p, 2, "2^40")


def with_timeout(fn, seconds):
    """fn() in a thread; its result, or a Failure when it runs past seconds."""
    result = []
    t = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    expect(not t.is_alive(), f"still running after {seconds} s")
    return result[0]


def case_fifo(binary):
    """A FIFO or a device in place of runs.csv, steps.csv or phases.csv:
    compare.py, plot.py and predict --from refuse it at once, naming it."""
    with tempfile.TemporaryDirectory() as out:
        for name, make, what in (("runs.csv", os.mkfifo, "a FIFO"),
                                 ("steps.csv", os.mkfifo, "a FIFO"),
                                 ("phases.csv", os.mkfifo, "a FIFO"),
                                 ("runs.csv", lambda p: os.symlink("/dev/zero", p), "a device")):
            folder = copy_fixture("ci-host", out, f"f{len(os.listdir(out))}")
            os.remove(os.path.join(folder, name))
            make(os.path.join(folder, name))
            tools = ("plot.py",) if name == "phases.csv" else ("compare.py", "plot.py")
            why = with_timeout(lambda: refused_by_readers(folder, f"{name}: {what}", tools), 60)
            expect(not why, why)
            if name != "steps.csv":  # predict --from reads no steps.csv
                expect_exit(predict_from(binary, folder, out), 2, f"{name}: {what}")


def case_big_files(binary):
    """A runs.csv past its limit (64 MiB) and a steps.csv past its own (a
    sparse 2 GiB file) are refused at once (docs/results.md), exit 2 with one
    line, before either is read."""
    with tempfile.TemporaryDirectory() as out:
        for name, size in (("runs.csv", (64 << 20) + 1), ("steps.csv", 2 << 30)):
            folder = copy_fixture("ci-host", out, name.replace(".", "_"))
            with open(os.path.join(folder, name), "r+b") as f:
                f.truncate(size)
            start = time.monotonic()
            why = refused_by_readers(folder, f"{name}: {size} bytes, more than the")
            expect(not why, why)
            expect(time.monotonic() - start < 30, "refused only after reading it")


# ---- scale ----------------------------------------------------------------------

def million_rows(folder, rows):
    """ci-host's folder with its ddp configuration on two devices given rows
    steps.csv rows (rows / 2 steps of two ranks)."""
    shutil.copytree(os.path.join(FIXTURES, "ci-host"), folder)
    cid = "ddp-small-fp32-sgd-g2-b32-bk25"
    for col in ("steps", "steps_done"):
        set_cells(os.path.join(folder, "runs.csv"), col, str(rows // 2), cid)
    path = os.path.join(folder, "steps.csv")
    lines = open(path).read().splitlines()
    mine = [l.split(",", 3)[3] for l in lines[1:] if l.startswith(cid + ",")][:2]
    with open(path, "w") as f:
        f.write("\n".join(l for l in lines if not l.startswith(cid + ",")) + "\n")
        for k0 in range(0, rows // 2, 50000):
            f.write("".join(f"{cid},{k},0,{mine[0]}\n{cid},{k},1,{mine[1]}\n"
                            for k in range(k0, min(rows // 2, k0 + 50000))))


PEAK_PROBE = """
import resource, sys
from dpstools import folder, judge
folder.Folder(sys.argv[1])
judge.RunFolder(sys.argv[1])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def case_memory(binary):
    """The readers of plot.py and compare.py on a folder whose steps.csv has
    a million rows (142 MB) peak under PEAK_BOUND_MIB (docs/results.md),
    under an address-space limit of 2 GiB, and read it in linear time."""
    with tempfile.TemporaryDirectory() as out:
        folder = os.path.join(out, "big")
        million_rows(folder, 1000000)
        limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731
        start = time.monotonic()
        p = subprocess.run([PYTHON, "-c", PEAK_PROBE, folder], capture_output=True, text=True,
                           timeout=300, preexec_fn=limit,
                           env={**os.environ, "PYTHONPATH": SCRIPTS})
        took = time.monotonic() - start
        expect(p.returncode == 0, f"the readers failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
        peak = int(p.stdout.split()[-1])
        print(f"plot.py's and compare.py's readers on 1M steps.csv rows: peak {peak} MiB, "
              f"{took:.1f} s")
        expect(peak < PEAK_BOUND_MIB, f"peak {peak} MiB, above the {PEAK_BOUND_MIB} MiB stated")


def case_resume_rows(binary):
    """--resume over a runs.csv of 100 001 rows takes seconds, not minutes
    (the rows it keeps are found by hash, not by a scan of those before)."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--mode", "dp", "--gpus", "1", "--model", "tiny", "--steps", "3",
                "--no-links", out=out, name="m", check_rc=0)
        path = os.path.join(out, "m", "runs.csv")
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        header, first = rows[0], rows[1]
        for i in range(100000):
            r = list(first)
            r[0], r[header.index("status")] = f"dp-tiny-fp32-sgd-g1-b{1000 + i}", "skipped"
            rows.append(r)
        with open(path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
        start = time.monotonic()
        dpscale(binary, "sweep", "--mode", "dp", "--gpus", "1", "--model", "tiny", "--steps", "3",
                "--no-links", "--resume", out=out, name="m", check_rc=0)
        took = time.monotonic() - start
        expect(took < 5, f"--resume over 100 001 rows took {took:.1f} s")
        expect(len(dpsresults.read_csv(path)) == 100001, "--resume lost rows")


CASES = {"text_cells": case_text_cells, "predict_ranges": case_predict_ranges,
         "strict_cells": case_strict_cells, "from_cells": case_from_cells,
         "status_words": case_status_words, "foreign_headers": case_foreign_headers,
         "suite_limit": case_suite_limit, "fifo": case_fifo, "big_files": case_big_files,
         "memory": case_memory, "resume_rows": case_resume_rows}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[2], CASES[sys.argv[2]], sys.argv[1]))
