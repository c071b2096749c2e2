#!/usr/bin/env python3
"""The results folder as one writer leaves it: a configuration's rows are
all in it or none (a write that fails midway is taken back), one writer at a
time (the lock), headers checked before anything runs, --resume that runs
again what did not finish, and a row for every failure; and whatever happens
to it meanwhile (stdout's reader gone, a writer killed or hung up on
mid-commit, the folder deleted, moved or made read-only, links planted in
it, stdout or stderr closed), nothing in it is duplicated, torn or written
elsewhere, and the strict readers accept it. Usage:
test_folder.py DPSCALE CASE; exit 0 pass, 1 fail (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

# the results folder: transaction, lock, headers, resume, a row for every failure; stdout's
# reader gone, a writer killed mid-commit, the folder deleted, moved or read-only under a
# sweep (each at a system call strace stops the process at; 77 without strace, read-only
# without a mount namespace too), the trace of a roll-back, links planted in it, stdout or
# stderr closed, an odd hostname (UTS namespace; 77 without), a configuration an earlier
# dpscale wrote twice
# (meson's timeout above the cases' 300 s hang guards, so that a hang is reported as one)
TESTS = [test("folder " + c.replace("_", " "), DPSCALE, c, timeout=420)
         for c in ("full_disk", "lock", "headers", "resume", "row_always", "closed_pipe",
                   "kill_commit", "deleted", "moved", "read_only", "rollback_trace", "symlinks",
                   "closed_stdio", "hostname", "repeated_rows")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from helpers import children, dpscale, dpsresults, expect, expect_exit, read_folder, run_case, write

SUITE = "modes = dp, ddp\ngpus = 1, 2\nmodels = tiny\nsteps = 30\nwarmup = 0\n"
ROW_FILES = ("runs.csv", "steps.csv", "devices.csv", "phases.csv", "memory.csv", "buckets.csv",
             "partition.csv")


def records(path):
    """The lines of a CSV file dpscale wrote (no field of these tests holds a
    newline), and whether its last line is whole."""
    if not os.path.exists(path):
        return [], True
    with open(path, "rb") as f:
        data = f.read()
    return data.decode().splitlines(), not data or data.endswith(b"\n")


def check_whole(folder, ended=True):
    """Every file ends on a whole row and holds one header; the detail files
    hold rows of runs.csv's configurations only; runs.csv names each once;
    the strict readers accept the folder (ended: with read_folder's checks
    of a run that ended, meta.json's end time among them). Returns runs.csv's
    rows."""
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
    if not runs:
        return []
    if ended:
        return read_folder(folder)[0]
    present = [n for n in ROW_FILES if os.path.exists(os.path.join(folder, n))]
    return dpsresults.read_folder(folder, {n: [] for n in present})["runs.csv"]


# A run whose files cannot grow, outside strict mode: strict device memory is
# a sparse memory file of 64 GiB a device, which the file-size limit these
# tests set refuses (docs/DESIGN.md, "The host backend's strict device memory")
NOT_STRICT = dict(os.environ, DPSCALE_STRICT="0")


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
                           preexec_fn=limit_file_size(12000), env=NOT_STRICT)
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
            meta = os.path.join(out, "t", "meta.json")
            wait_for(lambda: os.path.exists(lock) and open(lock).read().strip() == str(first.pid)
                     and os.path.exists(meta), "the first writer's lock and meta.json", first)
            expect(first.poll() is None, f"the first writer ended: exit {first.returncode}")
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
                               capture_output=True, text=True, timeout=300, env=env,
                               preexec_fn=pre)
            expect_exit(p, 1, "out of host memory for the step records")
            runs = check_whole(os.path.join(out, cmd))
            expect(len(runs) == 1 and runs[0]["status"] == "error" and
                   "step records" in runs[0]["error"], f"{cmd}: runs.csv {runs}")


def check_traces(folder, runs):
    """trace/ holds a timeline only for configurations in runs.csv that ended ok."""
    ok = {r["config_id"] for r in runs if r["status"] == "ok"}
    trace = os.path.join(folder, "trace")
    names = os.listdir(trace) if os.path.isdir(trace) else []
    stray = sorted(n for n in names if n[:-len(".json")] not in ok)
    expect(not stray, f"trace/ holds {stray}, of no configuration that ended ok in runs.csv")


LONG_SWEEP = ["sweep", "--mode", "dp", "--gpus", "1,2", "--model", "small", "--steps", "40",
              "--warmup", "0", "--no-links", "--backend", "host"]


def wait_for(cond, what, proc=None, timeout=300):
    """Polls cond() every 10 ms until it holds; fails when proc ends first,
    or as hung past the timeout (a hang guard, far above what a busy machine
    takes)."""
    deadline = time.monotonic() + timeout
    while not cond():
        expect(time.monotonic() < deadline, f"{what}: hung (not there after {timeout} s)")
        expect(proc is None or proc.poll() is None, f"{what}: the process ended first "
               f"(exit {proc and proc.returncode})")
        time.sleep(0.01)


def case_closed_pipe(binary):
    """stdout's reader goes away (`dpscale sweep | head -c 1`): the sweep runs
    on, exits 0 and writes every configuration once."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        with open(os.path.join(out, "err"), "w") as err:
            p = subprocess.Popen([binary, "sweep", suite, "--no-links", "--backend", "host",
                                  "--out", out, "--name", "t"], stdout=subprocess.PIPE, stderr=err)
            p.stdout.read(1)
            p.stdout.close()
            rc = p.wait(timeout=300)
        stderr = open(os.path.join(out, "err")).read()
        expect(rc == 0, f"exit {rc} once stdout's reader went away (a negative exit is the signal "
                        f"that killed it):\n{stderr}")
        runs = check_whole(os.path.join(out, "t"))
        expect(len(runs) == 4 and all(r["status"] == "ok" for r in runs), f"runs.csv: {runs}")


def can_strace():
    """Whether strace is here and may trace (ptrace permitted); says why not."""
    ok = bool(shutil.which("strace")) and subprocess.run(
        ["strace", "-o", "/dev/null", "true"], capture_output=True, timeout=300).returncode == 0
    if not ok:
        print("SKIP: strace cannot stop a process at a system call here (missing, or ptrace "
              "not permitted)")
    return ok


def stop_at(syscalls, path, log):
    """A command prefix under which every process stops (SIGSTOP, strace's
    fault injection) on its first call of each of syscalls on path (a file
    or folder, named or through a descriptor), strace's events in log: the
    point a test hits is a system call, not a moment."""
    return ["strace", "-f", "-o", log, "-P", path, "-e", f"trace={syscalls}",
            "-e", f"inject={syscalls}:signal=STOP:when=1"]


def traced_env():
    """The environment of a dpscale run under strace."""
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:  # LeakSanitizer cannot run under ptrace
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    return env


# strace -f pads a pid to 5 columns: "123   --- stopped ...", "12345 --- stopped ..."
STRACE_EVENT = re.compile(r"^(\d+) +(?:(--- stopped by SIGSTOP ---)|\+\+\+ (?:exited|killed))",
                          re.M)


def strace_events(log, offset):
    """The events in log's whole lines from byte offset: [(pid, True: it
    stopped, False: it ended)], and the offset after them."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    data = data[:data.rfind(b"\n") + 1]
    events = [(int(m[1]), bool(m[2])) for m in STRACE_EVENT.finditer(data.decode(errors="replace"))]
    return events, offset + len(data)


def is_thread(pid):
    """Whether pid is a thread other than its process's first (strace -f
    reports each thread's stop: strict mode's stream workers stop with their
    process), so that follow_stops counts processes."""
    try:
        with open(f"/proc/{pid}/status") as f:
            tgid = next(int(line.split()[1]) for line in f if line.startswith("Tgid:"))
    except (OSError, StopIteration, ValueError):
        return False
    return tgid != pid


def let_go(pid):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def follow_stops(p, log, act, nth=1, timeout=300):
    """Until p (a command run under stop_at) ends: act(pid, sweep) when the
    nth process other than the sweep (p's child) stops the first time, and
    every stopped process let go on (SIGCONT), the one act was given too
    unless act returns False. Fails when p ends before the nth such process
    stopped, and as hung past the timeout (a hang guard, far above what a
    busy machine takes). Returns p's exit status."""
    deadline, offset = time.monotonic() + timeout, 0
    stopped_before, seen, sweep = set(), 0, None
    what = f"the sweep under strace ({log})"
    while True:
        ended = p.poll() is not None
        events, offset = strace_events(log, offset)
        for pid, stopped in events:
            if not stopped:  # it ended: a later process may have its pid
                stopped_before.discard(pid)
                continue
            if sweep is None:
                found = children(p.pid)
                expect(len(found) == 1, f"the sweep's process under strace: {found}")
                sweep = found[0]
            if is_thread(pid):  # its process's own stop comes too: SIGCONT to it wakes all
                continue
            first = pid != sweep and pid not in stopped_before
            stopped_before.add(pid)
            seen += first
            if not (first and seen == nth and act(pid, sweep) is False):
                let_go(pid)
        if ended:
            expect(seen >= nth, f"{what}: exit {p.returncode} before a process other than the "
                                f"sweep stopped, {seen} of the {nth} to reach")
            return p.returncode
        expect(time.monotonic() < deadline, f"{what}: hung, still running after {timeout} s")
        time.sleep(0.01)


def run_traced(cmd, out, act, nth=1, **popen):
    """cmd (prefixed by stop_at, its log out/strace.log) run with stderr to
    out/err, through follow_stops; its exit status and stderr."""
    with open(os.path.join(out, "err"), "w") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=traced_env(),
                             **popen)
        try:
            rc = follow_stops(p, os.path.join(out, "strace.log"), act, nth)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return rc, open(os.path.join(out, "err")).read()


def sweep_hit_mid_commit(binary, out, sig, whom):
    """A sweep (dp on 1 and 2 devices) whose first configuration's process is
    stopped as it writes its rows (at its first write to devices.csv: the
    journal on disk, steps.csv's rows appended, the other files' not yet)
    and sent sig: whom "child" signals that process (then let go on),
    "sweep" the sweep itself (the configuration's process, still stopped,
    dies with it). Returns the sweep's exit status and stderr."""
    folder = os.path.join(os.path.realpath(out), "t")
    cmd = stop_at("write", os.path.join(folder, "devices.csv"), os.path.join(out, "strace.log"))
    cmd += [binary, "sweep", "--mode", "dp", "--gpus", "1,2", "--model", "tiny", "--steps", "3",
            "--warmup", "0", "--no-links", "--backend", "host", "--out", out, "--name", "t"]

    def hit(pid, sweep):
        os.kill(sweep if whom == "sweep" else pid, sig)
        return whom != "sweep"
    # SIGHUP's default action, though the tests run under nohup (which dpscale honours)
    return run_traced(cmd, out, hit, preexec_fn=lambda: signal.signal(signal.SIGHUP,
                                                                      signal.SIG_DFL))


def case_kill_commit(binary):
    """A configuration's process killed (SIGKILL) or hung up on (SIGHUP)
    while it writes its rows, and a sweep killed while its configuration
    writes them: the folder holds each configuration once, whole, and reads;
    the next writer takes back what the killed sweep left half-written."""
    if not can_strace():
        return 77
    for sig in (signal.SIGKILL, signal.SIGHUP):
        with tempfile.TemporaryDirectory() as out:
            rc, err = sweep_hit_mid_commit(binary, out, sig, "child")
            expect(rc == 1, f"{sig.name}: exit {rc}, expected 1:\n{err}")
            runs = check_whole(os.path.join(out, "t"))
            check_traces(os.path.join(out, "t"), runs)
            expect(len(runs) == 2, f"{sig.name}: runs.csv {runs}")
            first = runs[0] if runs[0]["ngpus"] == "1" else runs[1]
            if sig == signal.SIGKILL:  # its rows taken back, the parent's row says why
                expect(first["status"] == "error" and "SIGKILL" in first["error"],
                       f"runs.csv: {first}")
            else:  # held until its rows were all in
                expect(first["status"] == "ok", f"runs.csv: {first}")
    with tempfile.TemporaryDirectory() as out:
        rc, err = sweep_hit_mid_commit(binary, out, signal.SIGKILL, "sweep")
        expect(rc != 0, f"the killed sweep: exit {rc}:\n{err}")
        p = dpscale(binary, "sweep", "--mode", "dp", "--gpus", "1,2", "--model", "tiny",
                    "--steps", "3", "--warmup", "0", "--no-links", "--resume", out=out, check_rc=0)
        expect("left half-written" in p.stderr, f"the next writer took nothing back:\n{p.stderr}")
        runs = check_whole(os.path.join(out, "t"))
        expect(sorted(r["status"] for r in runs) == ["ok", "ok"], f"after --resume: {runs}")


# the stat calls (stat, fstat, fstatat, statx): a configuration's process first looks at the
# folder once it has trained, before it opens anything in it
STAT_CALLS = "%%stat"


def stopped_after_first(binary, out, change):
    """A long sweep whose second configuration's process is stopped as it
    first looks at the folder (the first configuration in runs.csv, the
    second's rows not yet written), change() done meanwhile, then let go:
    its exit status and stderr."""
    folder = os.path.join(os.path.realpath(out), "t")
    cmd = stop_at(STAT_CALLS, folder, os.path.join(out, "strace.log"))
    cmd += [binary, *LONG_SWEEP, "--out", out, "--name", "t"]
    return run_traced(cmd, out, lambda pid, sweep: change(), nth=2)


def case_folder_deleted(binary):
    """The folder deleted under a sweep and made again by a second one: the
    first writes nothing more (its lock was on the folder that went) and
    says why; the new folder holds the second sweep's rows alone."""
    if not can_strace():
        return 77
    with tempfile.TemporaryDirectory() as out:
        folder = os.path.join(out, "t")
        second = []

        def replace():
            shutil.rmtree(folder)
            second.append(dpscale(binary, "sweep", "--mode", "ddp", "--gpus", "1", "--model",
                                  "tiny", "--steps", "3", "--no-links", out=out))
        rc, err = stopped_after_first(binary, out, replace)
        expect_exit(second[0], 0)
        expect(rc == 1 and "no longer the folder" in err, f"the first sweep: exit {rc}:\n{err}")
        runs = check_whole(folder)
        expect([r["config_id"] for r in runs] == ["ddp-tiny-fp32-sgd-g1-b8-bk25"],
               f"the new folder holds the first sweep's rows too: {runs}")
        check_traces(folder, runs)


def case_folder_moved(binary):
    """The folder renamed under a sweep: nothing is written at the old path
    again (no folder made there); the moved folder holds whole
    configurations and reads."""
    if not can_strace():
        return 77
    with tempfile.TemporaryDirectory() as out:
        folder, moved = os.path.join(out, "t"), os.path.join(out, "t-moved")
        rc, err = stopped_after_first(binary, out, lambda: os.rename(folder, moved))
        expect(rc == 1 and "no longer the folder" in err, f"the sweep: exit {rc}:\n{err}")
        expect(not os.path.exists(folder), f"{folder} made again, unlocked")
        runs = check_whole(moved, ended=False)
        expect(len(runs) == 1 and runs[0]["status"] == "ok", f"the moved folder: {runs}")
        check_traces(moved, runs)


READ_ONLY_SH = r'''
OUT=$1; NEW=$2; shift 2
mkdir -p "$OUT/t"
[ "$NEW" = 1 ] || mount --bind "$OUT/t" "$OUT/t" || exit
exec "$@" > "$OUT/out"
'''


def remount_read_only(pid, folder, new_mount):
    """In pid's mount namespace, folder's mount (new_mount: a mount made over
    it now) remounted read-only; None when done, else mount's message."""
    cmds = [["mount", "--bind", folder, folder]] if new_mount else []
    for cmd in cmds + [["mount", "-o", "remount,bind,ro", folder]]:
        p = subprocess.run(["nsenter", "-t", str(pid), "-m", *cmd], capture_output=True,
                           text=True, timeout=300)
        if p.returncode:
            return f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}"
    return None


def read_only_sweep(binary, out, new_mount):
    """A long sweep whose folder turns read-only as its first configuration
    runs: in a mount namespace of its own, the folder's mount (new_mount: a
    read-only mount made over it then) remounted read-only while the
    configuration's process is stopped as it first looks at the folder
    (trained, nothing of it written). (exit status, why the folder could not
    be made read-only or None, stderr), or None where namespaces or mounts
    are not permitted."""
    folder = os.path.join(os.path.realpath(out), "t")
    why = []

    def make_read_only(pid, sweep):
        why.append(remount_read_only(sweep, folder, new_mount))
    cmd = ["unshare", "-m", "--propagation", "private", "bash", "-c", READ_ONLY_SH, "ro", out,
           str(int(new_mount)), *stop_at(STAT_CALLS, folder, os.path.join(out, "strace.log")),
           binary, *LONG_SWEEP, "--out", out, "--name", "t"]
    if subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "--bind", out, out],
                      capture_output=True, timeout=300).returncode != 0:
        return None
    rc, err = run_traced(cmd, out, make_read_only)
    return rc, why[0], err


def no_false_take_back(err):
    """A warning that rows could not be taken back names a file that is there."""
    for path in re.findall(r"(/\S+): cannot take back", err):
        expect(os.path.exists(path), f"a warning names {path}, which does not exist:\n{err}")


def case_read_only(binary):
    """The folder turns read-only mid-sweep: each configuration fails saying
    why, and a warning names only files that are there; nothing partial is
    left. A read-only mount made over the folder meanwhile changes nothing:
    the folder is written through what was opened and locked."""
    if not shutil.which("unshare") or not shutil.which("nsenter") or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True, timeout=300).returncode != 0:
        print("SKIP: no mount namespace here (unshare -m needs CAP_SYS_ADMIN)")
        return 77
    if not can_strace():
        return 77
    with tempfile.TemporaryDirectory() as out:
        got = read_only_sweep(binary, out, new_mount=False)
        if got is None:
            print("SKIP: mounts not permitted here")
            return 77
        rc, why, err = got
        expect(not why, f"the folder could not be made read-only while dpscale ran ({why}; a "
                        f"file of it stays open for writing?):\n{err}")
        expect(rc == 1 and "Read-only file system" in err, f"exit {rc}:\n{err}")
        no_false_take_back(err)
        expect(check_whole(os.path.join(out, "t")) == [], "rows written to a read-only folder")
    with tempfile.TemporaryDirectory() as out:
        rc, why, err = read_only_sweep(binary, out, new_mount=True)
        expect(not why, f"no read-only mount over the folder ({why}):\n{err}")
        no_false_take_back(err)
        expect(rc == 0, f"exit {rc} with a read-only mount over the folder:\n{err}")
        runs = check_whole(os.path.join(out, "t"))
        expect(len(runs) == 2 and all(r["status"] == "ok" for r in runs), f"runs.csv: {runs}")


def case_rollback_trace(binary):
    """Files that cannot grow (as full_disk): a configuration taken back
    takes its timeline (trace/) with it."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        p = subprocess.run([binary, "sweep", suite, "--no-links", "--backend", "host", "--out", out,
                            "--name", "t"], capture_output=True, text=True, timeout=300,
                           preexec_fn=limit_file_size(12000), env=NOT_STRICT)
        expect_exit(p, 1, "none of the configuration's rows were kept")
        folder = os.path.join(out, "t")
        runs = check_whole(folder)
        expect(any(r["status"] == "ok" for r in runs), f"no configuration fitted: {runs}")
        check_traces(folder, runs)


def case_symlinks(binary):
    """Symbolic links planted in the folder (the lock, a row file, trace/)
    are refused with a message, never followed: their targets stay as they
    were."""
    run = ["run", "--model", "tiny", "--steps", "2"]
    with tempfile.TemporaryDirectory() as out:
        folder, other = os.path.join(out, "t"), os.path.join(out, "other")
        os.mkdir(folder)
        os.mkdir(other)
        victim, empty = write(os.path.join(out, "victim"), "important\n"), \
            write(os.path.join(out, "empty"), "")
        for name, target, rc in ((".dpscale.lock", victim, 2), ("steps.csv", empty, 2),
                                 ("trace", other, 1)):
            os.symlink(target, os.path.join(folder, name))
            p = dpscale(binary, *run, out=out)
            said = p.stdout + p.stderr  # a configuration's error is its table row's
            expect(p.returncode == rc and name in said and "symbolic link" in said,
                   f"{name} a link: exit {p.returncode}, expected {rc}, naming it:\n{said}")
            expect(open(victim).read() == "important\n" and open(empty).read() == "" and
                   not os.listdir(other), f"{name}: a link's target was written")
            os.unlink(os.path.join(folder, name))
        runs = check_whole(folder)
        expect([r["status"] for r in runs] == ["error"] and "trace" in runs[0]["error"],
               f"runs.csv: {runs}")


def case_closed_stdio(binary):
    """stdout or stderr closed when dpscale starts: the lock file holds the
    pid only, and what would have gone to the closed one is dropped."""
    for fd in (1, 2):
        with tempfile.TemporaryDirectory() as out:
            p = subprocess.run([binary, "sweep", "--mode", "dp", "--gpus", "1", "--model", "tiny",
                                "--steps", "2", "--no-links", "--backend", "host", "--out", out,
                                "--name", "t"], capture_output=True, text=True, timeout=300,
                               preexec_fn=lambda fd=fd: os.close(fd))
            lock = open(os.path.join(out, "t", ".dpscale.lock")).read()
            expect(lock.strip().isdigit(), f"fd {fd} closed: the lock file holds {lock!r}")
            expect(p.returncode == 0, f"fd {fd} closed: exit {p.returncode}:\n{p.stderr}")
            check_whole(os.path.join(out, "t"))
            if fd == 2:
                expect(" ok\n" in p.stdout, f"stderr closed: the table is lost:\n{p.stdout}")


HOSTNAME_PY = r'''
import socket, subprocess, sys
socket.sethostname(b"ev\xffil/sub.example")
cmd = sys.argv[1:]
print(subprocess.run(cmd, capture_output=True).returncode)
r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, errors="replace")
print(r.returncode)
print(r.stderr.replace("\n", " | "))
'''


def case_hostname(binary):
    """A hostname with '/' and a byte that is not UTF-8 gives a default
    folder name directly under --out that --resume continues."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-u", "true"], capture_output=True).returncode != 0:
        print("SKIP: no UTS namespace here (unshare -u needs CAP_SYS_ADMIN)")
        return 77
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run(["unshare", "-u", sys.executable, "-c", HOSTNAME_PY, binary, "sweep",
                            "--mode", "dp", "--gpus", "1", "--model", "tiny", "--steps", "2",
                            "--no-links", "--backend", "host", "--out", out],
                           capture_output=True, text=True, timeout=300)
        expect(p.returncode == 0, f"exit {p.returncode}:\n{p.stderr}")
        first, resumed, err = p.stdout.splitlines()
        names = sorted(os.listdir(out))
        expect(first == "0" and resumed == "0", f"sweep exit {first}, --resume exit {resumed}: {err}")
        expect(len(names) == 2 and names[0].endswith("-ev-il-sub") and names[1] == "latest",
               f"{out} holds {names}")


def case_repeated_rows(binary):
    """A folder in which an earlier dpscale wrote a configuration twice (its
    devices.csv rows repeated, a second runs.csv row): --resume takes it out
    and runs it again, and the strict readers accept the folder after."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        dpscale(binary, "sweep", suite, "--no-links", out=out, check_rc=0)
        folder = os.path.join(out, "t")
        runs = check_whole(folder)
        twice = runs[0]["config_id"]
        for name in ("devices.csv", "runs.csv"):
            lines, _ = records(os.path.join(folder, name))
            mine = [line for line in lines if line.startswith(twice + ",")]
            if name == "runs.csv":
                mine = [",".join(mine[0].split(",")[:1] + ["error"] + mine[0].split(",")[2:])]
            append_bytes(os.path.join(folder, name), ("\n".join(mine) + "\n").encode())
        p = dpscale(binary, "sweep", suite, "--no-links", "--resume", out=out, check_rc=0)
        expect("twice" in p.stderr, f"stderr: {p.stderr}")
        runs = check_whole(folder)
        expect(sorted(r["status"] for r in runs) == ["ok"] * 4, f"after --resume: {runs}")


CASES = {"full_disk": case_full_disk, "lock": case_lock, "headers": case_headers,
         "resume": case_resume, "row_always": case_row_always, "closed_pipe": case_closed_pipe,
         "kill_commit": case_kill_commit, "deleted": case_folder_deleted,
         "moved": case_folder_moved, "read_only": case_read_only,
         "rollback_trace": case_rollback_trace, "symlinks": case_symlinks,
         "closed_stdio": case_closed_stdio, "hostname": case_hostname,
         "repeated_rows": case_repeated_rows}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    return run_case(case, CASES[case], binary)


if __name__ == "__main__":
    sys.exit(main())
