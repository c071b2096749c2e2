#!/usr/bin/env python3
"""compare.py and plot.py on broken copies of the fixture folders: each is
refused with exit 2 and one line that names the file (and line) and what to
do, never a traceback; a folder with failed and skipped configurations
(mixed-host) is read. Usage: test_readers.py compare|plot|mixed; exit 0
pass, 1 fail (every broken copy that was not refused so is listed)."""
from listing import NOSAN, exit_if_listing, test

TESTS = [test("readers " + c, c, suite=NOSAN, timeout=300) for c in ("compare", "plot", "mixed")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import json
import os
import sys
import tempfile

from helpers import FIXTURES, Failure, copy_fixture, expect_exit, run_case, script

CID = "dp-small-fp32-sgd-g1-b16"  # ci-host's first configuration: one device, 30 steps
NO_SUMMARY = {**os.environ, "GITHUB_STEP_SUMMARY": ""}


def edit(name, fn):
    """A mutation: fn(header, rows) edits the raw rows of a CSV file."""
    def mutate(folder):
        path = os.path.join(folder, name)
        with open(path, newline="") as f:
            header, *rows = list(csv.reader(f))
        fn(header, rows)
        with open(path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows([header] + rows)
    return mutate


def cell(name, col, value, row=0):
    def fn(header, rows):
        rows[row][header.index(col)] = value
    return edit(name, fn)


def steps_of(cid, fn):
    """fn(header, rows of cid) returns the rows of cid to keep."""
    def edit_rows(header, rows):
        mine = [r for r in rows if r[0] == cid]
        rows[:] = fn(header, mine) + [r for r in rows if r[0] != cid]
    return edit("steps.csv", edit_rows)


def set_every(col, value):
    def fn(header, rows):
        for r in rows:
            r[header.index(col)] = value
        return rows
    return fn


def meta(key, value, device=None):
    """meta.json with key set to value (in devices[device] when given)."""
    def mutate(folder):
        path = os.path.join(folder, "meta.json")
        with open(path) as f:
            m = json.load(f)
        (m if device is None else m["devices"][device])[key] = value
        with open(path, "w") as f:
            json.dump(m, f)
    return mutate


def raw(name, data):
    def mutate(folder):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    return mutate


def bytes_in(name, data, line=1):
    """Inserts data at the start of a line (0: the header) of a file."""
    def mutate(folder):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        lines[line] = data + lines[line]
        with open(path, "wb") as f:
            f.write(b"\n".join(lines))
    return mutate


def folder_for(name):
    def mutate(folder):
        os.remove(os.path.join(folder, name))
        os.mkdir(os.path.join(folder, name))
    return mutate


def nothing(folder):
    pass


def links(bw):
    return raw("links.csv", b"src,dst,method,bytes,bw_gbps,latency_us,status\n"
               b"host,dev0,h2d,1048576," + bw + b",,ok\n")


BOTH = [  # (what, mutation, extra arguments, what stderr must hold)
    ("meta.json not an object", raw("meta.json", b"[1, 2]"), [], ["meta.json: not a JSON object"]),
    ("devices a number", meta("devices", 5), [], ["meta.json: devices is a number"]),
    ("a device not an object", meta("devices", ["x"]), [], ["meta.json: devices[0] is a string"]),
    ("invalid UTF-8", bytes_in("runs.csv", b"\xff"), [], ["runs.csv:2: not UTF-8"]),
    ("a field too long", cell("runs.csv", "error", "x" * 200000), [],
     ["runs.csv:2:", "131072 characters"]),
    ("runs.csv a folder", folder_for("runs.csv"), [], ["runs.csv: a folder, not a file"]),
    ("devices.csv a folder", folder_for("devices.csv"), [], ["devices.csv: a folder, not a file"]),
]

COMPARE = BOTH + [
    ("steps cut short", steps_of(CID, lambda h, rows: rows[:2]), [],
     [f"steps.csv: {CID}: 2 rows", "runs.csv:2 promises 30"]),
    ("a configuration twice", edit("runs.csv", lambda h, rows: rows.append(rows[0])), [],
     [f"runs.csv:6: configuration {CID} again (first at line 2)"]),
    ("no memory", cell("devices.csv", "alloc_peak_bytes", "0"), [],
     ["devices.csv:2: column alloc_peak_bytes is 0"]),
    ("negative memory", cell("devices.csv", "alloc_peak_bytes", "-5"), [],
     ["devices.csv:2: column alloc_peak_bytes is below 0: '-5'"]),
    ("every step numbered 0", steps_of(CID, set_every("step", "0")), [],
     [f"steps.csv:3: {CID}: step 0, rank 0 again (first at line 2)"]),
    ("zero step_ms", steps_of(CID, set_every("step_ms", "0")), [],
     ["steps.csv:", "column step_ms is not above 0: '0'"]),
    ("zero global_batch", cell("runs.csv", "global_batch", "0"), [],
     ["runs.csv:2: column global_batch is below 1: '0'"]),
    ("zero params", cell("runs.csv", "params", "0"), [], ["runs.csv:2: column params is below 1"]),
    ("versions not an object", meta("versions", [1]), [], ["meta.json: versions is an array"]),
    ("--fail-above nan", nothing, ["--fail-above", "nan"], ["argument --fail-above"]),
    ("--fail-above inf", nothing, ["--fail-above", "inf"], ["argument --fail-above"]),
    ("--fail-above -1", nothing, ["--fail-above", "-1"], ["argument --fail-above"]),
    ("--alpha nan", nothing, ["--alpha", "nan"], ["argument --alpha"]),
    ("--alpha 1", nothing, ["--alpha", "1"], ["argument --alpha"]),
    ("--markdown in no folder", nothing, ["--markdown", "{tmp}/none/r.md"],
     ["--markdown {tmp}/none/r.md: cannot write"]),
    ("--json a folder", nothing, ["--json", "{tmp}"], ["--json {tmp}: cannot write"]),
]

PLOT = BOTH + [
    ("ngpus nan", cell("runs.csv", "ngpus", "nan"), [], ["runs.csv:2: column ngpus is not finite"]),
    ("ngpus inf", cell("runs.csv", "ngpus", "inf"), [], ["runs.csv:2: column ngpus is not finite"]),
    ("ngpus 0", cell("runs.csv", "ngpus", "0"), [], ["runs.csv:2: column ngpus is below 1"]),
    ("device 0.5", cell("devices.csv", "device", "0.5"), [],
     ["devices.csv:2: column device is not a whole number"]),
    ("achieved_gbps fast", cell("phases.csv", "achieved_gbps", "fast"), [],
     ["phases.csv:2: column achieved_gbps is not a number"]),
    ("samples_per_s 0", cell("runs.csv", "samples_per_s", "0"), [],
     ["runs.csv:2: column samples_per_s is not above 0"]),
    ("a link at 0 GB/s", links(b"0"), [], ["links.csv:2: column bw_gbps is not above 0"]),
    ("a device name not a string", meta("name", 5, device=0), [],
     ["meta.json: devices[0].name is a number"]),
    ("--out a file", nothing, ["--out", "{tmp}/file"], ["--out {tmp}/file: "]),
]


def refused(tool, fixture, what, mutate, extra, needles):
    """Why a broken copy was not refused as it should be, or None."""
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "file"), "w").close()
        cur = copy_fixture(fixture, tmp, "cur")
        mutate(cur)
        extra = [a.format(tmp=tmp) for a in extra]
        needles = [n.format(tmp=tmp) for n in needles]
        if tool == "compare.py":
            args = [os.path.join(FIXTURES, fixture), cur, *extra]
        else:
            args = [cur, "--out", os.path.join(tmp, "out"), *extra]
        p = script(tool, *args, env=NO_SUMMARY)
        lines = p.stderr.strip().splitlines()
        option = extra and "usage:" in p.stderr
        if p.returncode == 2 and "Traceback" not in p.stderr and (len(lines) == 1 or option) \
                and all(n in p.stderr for n in needles):
            return None
        return f"{what}: exit {p.returncode}, expected 2 with {needles} in one line:\n" + \
            "\n".join("    " + l[:300] for l in lines[-6:])


def check(tool, fixture, cases):
    bad = [why for why in (refused(tool, fixture, *c) for c in cases) if why]
    if bad:
        raise Failure(f"{len(bad)} of {len(cases)} broken folders not refused as they should "
                      f"be:\n" + "\n".join(bad))


def case_mixed():
    """ok, oom and skipped configurations side by side: compared and drawn."""
    folder = os.path.join(FIXTURES, "mixed-host")
    with tempfile.TemporaryDirectory() as tmp:
        expect_exit(script("compare.py", folder, folder, env=NO_SUMMARY), 0)
        expect_exit(script("plot.py", folder, "--out", tmp), 0)


CASES = {"compare": lambda: check("compare.py", "ci-host", COMPARE),
         "plot": lambda: check("plot.py", "results-host", PLOT), "mixed": case_mixed}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[1], CASES[sys.argv[1]]))
