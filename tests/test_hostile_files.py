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
docs/results.md states; --resume over 100 000 rows keeping every one (its
time printed, a figure rather than a verdict).
Usage: test_hostile_files.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skipped."""
from listing import DPSCALE, exit_if_listing, test

# what dpscale writes its readers take, and only that: text cells, predict's ranges, cells
# dpscale never writes (Python readers and predict --from alike), status words, foreign
# headers, a suite's limits, FIFOs and files past the size limit; the readers' peak memory
# on 1M steps.csv rows (alone: measured) and --resume over 100 000 rows (its time printed)
TESTS = [test("hostile " + c.replace("_", " "), DPSCALE, c, suite="scripts", timeout=300,
              parallel=c != "memory")
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


# Runs a script (argv[2], its arguments after) and writes the bytes its process read, the
# rchar of /proc/self/io, to the file argv[1] as it exits, whatever its exit status.
READ_PROBE = """
import atexit, os, runpy, sys
report, path = sys.argv[1], sys.argv[2]

def bytes_read():
    with open("/proc/self/io") as f:
        rchar = next(line for line in f if line.startswith("rchar:")).split()[1]
    with open(report, "w") as f:
        f.write(rchar)

atexit.register(bytes_read)
sys.argv = sys.argv[2:]
sys.path.insert(0, os.path.dirname(path))
runpy.run_path(path, run_name="__main__")
"""
READERS = ("compare.py", "plot.py")
HANG_GUARD_S = 300  # far above what a busy machine takes


def run_reader(tool, folder, tmp, count_reads=False):
    """compare.py (folder against itself) or plot.py (folder, its charts
    into tmp): its finished process, and with count_reads the bytes that
    process read (else None)."""
    args = [folder, folder] if tool == "compare.py" else [folder, "--out", tmp]
    if not count_reads:
        return script(tool, *args, env=NO_SUMMARY, timeout=HANG_GUARD_S), None
    report = os.path.join(tmp, "bytes-read")
    p = subprocess.run([PYTHON, "-c", READ_PROBE, report, os.path.join(SCRIPTS, tool), *args],
                       capture_output=True, text=True, timeout=HANG_GUARD_S, env=NO_SUMMARY)
    with open(report) as f:
        return p, int(f.read())


def refused(tool, p, needle):
    """Why p (tool's process) is not a refusal (exit 2, one line holding
    needle), or None."""
    if p.returncode != 2 or needle not in p.stderr or "Traceback" in p.stderr:
        return f"{tool}: exit {p.returncode}, expected 2 with {needle!r}:\n{p.stderr}"
    return None


def refused_by_readers(folder, needle, tools=READERS):
    """Why compare.py and plot.py (those of tools) do not both refuse folder
    (exit 2, one line holding needle), or None."""
    with tempfile.TemporaryDirectory() as tmp:
        for tool in tools:
            try:
                p, _ = run_reader(tool, folder, tmp)
            except subprocess.TimeoutExpired:
                return f"{tool}: hung, still running after {HANG_GUARD_S} s"
            why = refused(tool, p, needle)
            if why:
                return why
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
        p = subprocess.run(cmd, capture_output=True, timeout=HANG_GUARD_S)
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
                   backend=None, timeout=HANG_GUARD_S)


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


def case_fifo(binary):
    """A FIFO or a device in place of runs.csv, steps.csv or phases.csv:
    compare.py, plot.py and predict --from refuse it by what it is, naming
    it (a reader that opened the FIFO would block on it: hung, past the hang
    guard)."""
    with tempfile.TemporaryDirectory() as out:
        for name, make, what in (("runs.csv", os.mkfifo, "a FIFO"),
                                 ("steps.csv", os.mkfifo, "a FIFO"),
                                 ("phases.csv", os.mkfifo, "a FIFO"),
                                 ("runs.csv", lambda p: os.symlink("/dev/zero", p), "a device")):
            folder = copy_fixture("ci-host", out, f"f{len(os.listdir(out))}")
            os.remove(os.path.join(folder, name))
            make(os.path.join(folder, name))
            tools = ("plot.py",) if name == "phases.csv" else READERS
            why = refused_by_readers(folder, f"{name}: {what}", tools)
            expect(not why, why)
            if name != "steps.csv":  # predict --from reads no steps.csv
                expect_exit(predict_from(binary, folder, out), 2, f"{name}: {what}")


def case_big_files(binary):
    """A runs.csv past its limit (64 MiB) and a steps.csv past its own (a
    sparse 2 GiB file) are refused (docs/results.md), exit 2 with one line,
    before either is read: each reader's process reads no more bytes than
    when a folder in the file's place is refused by what it is."""
    with tempfile.TemporaryDirectory() as out:
        for name, size in (("runs.csv", (64 << 20) + 1), ("steps.csv", 2 << 30)):
            folder = copy_fixture("ci-host", out, name.replace(".", "_"))
            path = os.path.join(folder, name)
            os.rename(path, path + ".kept")
            os.mkdir(path)
            with tempfile.TemporaryDirectory() as tmp:
                unread = {tool: run_reader(tool, folder, tmp, count_reads=True)
                          for tool in READERS}
            os.rmdir(path)
            os.rename(path + ".kept", path)
            with open(path, "r+b") as f:
                f.truncate(size)
            for tool in READERS:
                p, read = unread[tool]
                why = refused(tool, p, f"{name}: a folder, not a file")
                expect(not why, f"the reference, a folder in place of {name}: {why}")
                with tempfile.TemporaryDirectory() as tmp:
                    p, read_big = run_reader(tool, folder, tmp, count_reads=True)
                why = refused(tool, p, f"{name}: {size} bytes, more than the")
                expect(not why, why)
                expect(read_big <= read, f"{tool} read {read_big} bytes refusing a {name} of "
                                         f"{size} bytes, {read_big - read} more than refusing a "
                                         f"folder in its place: it read the file first")


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
    under an address-space limit of 2 GiB (the time they take printed)."""
    with tempfile.TemporaryDirectory() as out:
        folder = os.path.join(out, "big")
        million_rows(folder, 1000000)
        limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731
        start = time.monotonic()
        p = subprocess.run([PYTHON, "-c", PEAK_PROBE, folder], capture_output=True, text=True,
                           timeout=HANG_GUARD_S, preexec_fn=limit,
                           env={**os.environ, "PYTHONPATH": SCRIPTS})
        took = time.monotonic() - start
        expect(p.returncode == 0, f"the readers failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
        peak = int(p.stdout.split()[-1])
        print(f"plot.py's and compare.py's readers on 1M steps.csv rows: peak {peak} MiB, "
              f"{took:.1f} s")
        expect(peak < PEAK_BOUND_MIB, f"peak {peak} MiB, above the {PEAK_BOUND_MIB} MiB stated")


def case_resume_rows(binary):
    """--resume over a runs.csv of 100 001 rows (100 000 skipped rows of
    other configurations, the suite's one ok) runs nothing again and keeps
    every row. The time it takes is printed, a figure for a note: whether
    the rows it keeps are found by hash or by a scan of those before is not
    for a shared machine's clock to decide."""
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
        p = dpscale(binary, "sweep", "--mode", "dp", "--gpus", "1", "--model", "tiny", "--steps",
                    "3", "--no-links", "--resume", out=out, name="m", check_rc=0)
        print(f"--resume over 100 001 runs.csv rows: {time.monotonic() - start:.1f} s")
        expect("--resume: 1 configuration already in" in p.stderr and "[1/" not in p.stderr,
               f"--resume ran the configuration already in runs.csv again:\n{p.stderr}")
        expect(len(dpsresults.read_csv(path)) == 100001, "--resume lost rows")


CASES = {"text_cells": case_text_cells, "predict_ranges": case_predict_ranges,
         "strict_cells": case_strict_cells, "from_cells": case_from_cells,
         "status_words": case_status_words, "foreign_headers": case_foreign_headers,
         "suite_limit": case_suite_limit, "fifo": case_fifo, "big_files": case_big_files,
         "memory": case_memory, "resume_rows": case_resume_rows}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[2], CASES[sys.argv[2]], sys.argv[1]))
