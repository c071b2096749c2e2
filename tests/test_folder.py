#!/usr/bin/env python3
"""The results folder as one writer leaves it: a configuration's rows are
all in it or none (a write that fails midway is taken back), one writer at a
time (the lock), headers checked before anything runs, --resume that runs
again what did not finish, and a row for every failure. Usage:
test_folder.py DPSCALE CASE; exit 0 pass, 1 fail (meson's convention)."""
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

from helpers import dpscale, expect, expect_exit, read_folder, run_case, write

SUITE = "modes = dp, ddp\ngpus = 1, 2\nmodels = tiny\nsteps = 30\nwarmup = 0\n"
ROW_FILES = ("runs.csv", "steps.csv", "devices.csv", "phases.csv", "memory.csv", "buckets.csv")


def records(path):
    """The lines of a CSV file dpscale wrote (no field of these tests holds a
    newline), and whether its last line is whole."""
    if not os.path.exists(path):
        return [], True
    with open(path, "rb") as f:
        data = f.read()
    return data.decode().splitlines(), not data or data.endswith(b"\n")


def check_whole(folder):
    """Every file ends on a whole row and holds one header; the detail files
    hold rows of runs.csv's configurations only; runs.csv names each once.
    Returns runs.csv's rows."""
    ids = {}
    for name in ROW_FILES:
        lines, whole = records(os.path.join(folder, name))
        expect(whole, f"{name} ends mid-row: {lines[-1:]}")
        if not lines:
            continue
        expect(lines.count(lines[0]) == 1, f"{name}: its header twice")
        ids[name] = [line.split(",", 1)[0] for line in lines[1:]]
    runs = ids.get("runs.csv", [])
    expect(len(runs) == len(set(runs)), f"runs.csv: a configuration twice: {sorted(runs)}")
    for name, got in ids.items():
        stray = set(got) - set(runs)
        expect(not stray, f"{name} holds rows of {sorted(stray)}, which runs.csv lacks")
    return read_folder(folder)[0] if runs else []


def limit_file_size(limit):
    """preexec_fn: files may grow to `limit` bytes, a write past it fails
    (EFBIG) as on a full disk."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def case_full_disk(binary):
    """Files that cannot grow: the sweep fails with a message, the folder
    holds whole configurations only, and --resume completes it."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        cmd = [binary, "sweep", suite, "--no-links", "--backend", "host", "--out", out,
               "--name", "t"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                           preexec_fn=limit_file_size(12000))
        folder = os.path.join(out, "t")
        runs = check_whole(folder)
        expect_exit(p, 1, "File too large", "none of the configuration's rows were kept")
        expect(any(r["status"] == "ok" for r in runs), f"no configuration fitted: {runs}")
        expect(p.stdout.count(" ok\n") == sum(r["status"] == "ok" for r in runs),
               f"the table and runs.csv disagree:\n{p.stdout}")
        p = dpscale(binary, "sweep", suite, "--no-links", "--resume", out=out, check_rc=0)
        runs = check_whole(folder)
        expect(len(runs) == 4 and all(r["status"] == "ok" for r in runs), f"after --resume: {runs}")


def case_lock(binary):
    """A second writer into a folder in use exits 2 naming the first's pid
    and writes nothing."""
    with tempfile.TemporaryDirectory() as out:
        first = subprocess.Popen([binary, "run", "--backend", "host", "--model", "tiny",
                                  "--steps", "1000000", "--out", out, "--name", "t"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            lock = os.path.join(out, "t", ".dpscale.lock")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                    os.path.exists(lock) and open(lock).read().strip() == str(first.pid)
                    and os.path.exists(os.path.join(out, "t", "meta.json"))):
                time.sleep(0.05)
            expect(first.poll() is None, f"the first writer ended: exit {first.returncode}")
            meta = os.path.join(out, "t", "meta.json")
            before = open(meta).read()
            for cmd in (["run", "--model", "tiny", "--gpus", "2", "--steps", "2"],
                        ["sweep", "--model", "tiny", "--steps", "2"], ["links"]):
                p = dpscale(binary, *cmd, out=out)
                expect_exit(p, 2, f"in use by dpscale process {first.pid}")
            expect(open(meta).read() == before, "meta.json rewritten by the refused writer")
            expect(not os.path.exists(os.path.join(out, "t", "links.csv")), "links measured")
        finally:
            first.kill()
            first.wait()
        p = dpscale(binary, "run", "--model", "tiny", "--gpus", "2", "--steps", "2", out=out)
        expect_exit(p, 0)


def case_headers(binary):
    """A file with another header is refused before anything trains."""
    with tempfile.TemporaryDirectory() as out:
        folder = os.path.join(out, "t")
        os.mkdir(folder)
        write(os.path.join(folder, "runs.csv"), "config_id,status\nx,ok\n")
        suite = write(os.path.join(out, "s.suite"), SUITE)
        p = dpscale(binary, "sweep", suite, "--no-links", out=out)
        expect_exit(p, 2, "runs.csv: its header differs")
        expect(not os.path.exists(os.path.join(folder, "steps.csv")), "a configuration ran")
        expect(not os.path.exists(os.path.join(folder, "meta.json")), "meta.json written")


def set_status(path, config_id, status):
    lines, _ = records(path)
    for i, line in enumerate(lines):
        cells = line.split(",")
        if cells[0] == config_id:
            cells[1] = status
            lines[i] = ",".join(cells)
    write(path, "\n".join(lines) + "\n")


def append_bytes(path, data):
    with open(path, "ab") as f:
        f.write(data)


def case_resume(binary):
    """--resume runs again what did not finish, takes torn and stray rows
    out, and a sweep without it refuses configurations already there."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        dpscale(binary, "sweep", suite, "--no-links", out=out, check_rc=0)
        folder = os.path.join(out, "t")
        runs = check_whole(folder)
        failed, stray = runs[1]["config_id"], runs[3]["config_id"]
        set_status(os.path.join(folder, "runs.csv"), failed, "error")
        lines, _ = records(os.path.join(folder, "runs.csv"))
        write(os.path.join(folder, "runs.csv"),
              "\n".join(line for line in lines if not line.startswith(stray + ",")) + "\n")
        append_bytes(os.path.join(folder, "steps.csv"), b"dp-tin")  # a row cut short
        p = dpscale(binary, "sweep", suite, "--no-links", out=out)
        expect_exit(p, 2, "already holds", "--resume")
        # the stray configuration's rows (runs.csv lacks it) give way to its new ones
        dpscale(binary, "sweep", suite, "--no-links", "--filter", stray, out=out, check_rc=0)
        check_whole(folder)
        p = dpscale(binary, "sweep", suite, "--no-links", "--resume", out=out, check_rc=0)
        expect("1 configuration that did not finish" in p.stderr, f"stderr: {p.stderr}")
        expect("3 configurations already in" in p.stderr, f"stderr: {p.stderr}")
        runs = check_whole(folder)
        expect(sorted(r["status"] for r in runs) == ["ok"] * 4, f"after --resume: {runs}")


def huge_run_env():
    """The environment and preexec_fn under which allocating the step records
    of 10,000,000 steps on 64 devices fails on any machine."""
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:  # the sanitizer's allocator reserves address space itself
        env["ASAN_OPTIONS"] += ":allocator_may_return_null=1:max_allocation_size_mb=4096"
        return env, None
    # 3 GiB: the libraries fit, none of the records does (malloc would otherwise fill
    # the 5 GiB that fit an 8 GiB limit byte by byte under MALLOC_PERTURB_)
    return env, lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def case_row_always(binary):
    """A configuration whose step records do not fit in memory leaves a
    message and an error row, run and sweep alike."""
    env, pre = huge_run_env()
    with tempfile.TemporaryDirectory() as out:
        for cmd in ("run", "sweep"):
            p = subprocess.run([binary, cmd, "--backend", "host", "--host-devices", "64", "--gpus",
                                "64", "--mode", "dp", "--model", "tiny", "--steps", "10000000",
                                *(["--no-links"] if cmd == "sweep" else []), "--out", out,
                                "--name", cmd],
                               capture_output=True, text=True, timeout=120, env=env,
                               preexec_fn=pre)
            expect_exit(p, 1, "out of host memory for the step records")
            runs = check_whole(os.path.join(out, cmd))
            expect(len(runs) == 1 and runs[0]["status"] == "error" and
                   "step records" in runs[0]["error"], f"{cmd}: runs.csv {runs}")


CASES = {"full_disk": case_full_disk, "lock": case_lock, "headers": case_headers,
         "resume": case_resume, "row_always": case_row_always}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    return run_case(case, CASES[case], binary)


if __name__ == "__main__":
    sys.exit(main())
