"""What the Python tests share: the checkout's paths, running the dpscale
binary and the scripts, fixtures copied to a temporary folder, results
folders read through scripts/dpstools/results.py and checked, the
assertions, and the PyTorch tests' steps (PyTorch looked up,
torch_reference.py run, loss curves and parameters compared). The tests
import the scripts' package, dpstools: meson runs them with scripts/ on
PYTHONPATH (tests/meson.build's default test setup)."""
import csv
import importlib.util
import os
import shutil
import subprocess
import sys

from dpstools import results as dpsresults
from dpstools.results import COLUMNS, OPTIONAL_COLUMNS

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "scripts")
FIXTURES = os.path.join(HERE, "fixtures")
# the scripts' interpreter (numpy, matplotlib): Debian's, or DPSCALE_PYTHON where they live
# elsewhere (a GPU machine's venv)
PYTHON = os.environ.get("DPSCALE_PYTHON", "/usr/bin/python3")


class Failure(Exception):
    """An expectation of a test that does not hold."""


def expect(cond, what):
    if not cond:
        raise Failure(what)


def expect_exit(p, rc, *needles):
    """A finished process exited rc and its stderr holds every needle."""
    expect(p.returncode == rc and all(n in p.stderr for n in needles),
           f"exit {p.returncode}, expected {rc} with {list(needles)} in stderr:\n{p.stderr}")


def dpscale(binary, *args, out, name="t", backend="host", check_rc=None, timeout=300, env=None):
    """Runs `binary ARGS --backend BACKEND --out OUT --name NAME` (backend
    and name left out when None) in ENV (the caller's when None); with
    check_rc, another exit status fails."""
    cmd = [binary, *args] + (["--backend", backend] if backend else []) + ["--out", out] + \
        (["--name", name] if name else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check_rc is not None and p.returncode != check_rc:
        raise Failure(f"{' '.join(cmd)}: exit {p.returncode}, expected {check_rc}\n"
                      f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def script(name, *args, env=None, timeout=120):
    """Runs scripts/NAME ARGS under the scripts' interpreter."""
    return subprocess.run([PYTHON, os.path.join(SCRIPTS, name), *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def copy_fixture(fixture, tmp, name):
    """A folder of tests/fixtures (or the one an absolute path names) copied
    to TMP/NAME; returns that path."""
    dst = os.path.join(tmp, name)
    shutil.copytree(os.path.join(FIXTURES, fixture), dst)
    return dst


def rows_of(path):
    """A CSV file's rows as dicts, read leniently (to edit a fixture's copy)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def edit(path, fn):
    """Rewrites a CSV file with fn(rows) (dicts; the header: the first row's keys)."""
    rows = fn(rows_of(path))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def read_table(path, torch=False):
    """A CSV file dpscale wrote: every column of dpscale's list, in its order
    (torch: one scripts/torch_reference.py wrote, with the optional columns
    after them; torch_ops.csv: ops.csv's, results.SCHEMA_OF)."""
    name = dpsresults.SCHEMA_OF.get(os.path.basename(path), os.path.basename(path))
    want = COLUMNS[name] + (OPTIONAL_COLUMNS.get(name, []) if torch else [])
    table = dpsresults.read_csv(path, want, name)
    unlisted = [c for c in table.columns if c not in want]
    expect(not unlisted, f"{path}: column(s) {', '.join(unlisted)} missing from "
           f"dpstools.results.COLUMNS[{name!r}] (scripts/dpstools/results.py)")
    expect(table.columns == want,
           f"{path}: columns in another order than dpstools.results.COLUMNS[{name!r}]: "
           f"{table.columns}")
    return table


def read_folder(folder, torch=False):
    """(runs, devices, steps, phases, meta) of a results folder that dpscale
    (torch: scripts/torch_reference.py) wrote, checked: every column, meta.json key and
    version field, one devices.csv row per
    device, one steps.csv row per rank and step of each ok configuration
    (steps.csv is absent when none stepped), consistent step times."""
    steps_path = os.path.join(folder, "steps.csv")
    runs, devices, phases = (read_table(os.path.join(folder, n), torch)
                             for n in ("runs.csv", "devices.csv", "phases.csv"))
    steps = read_table(steps_path, torch) if os.path.exists(steps_path) else []
    meta = dpsresults.read_meta(folder, required=dpsresults.META_KEYS)
    expect(meta["end_time"], "meta.json has no end_time")
    missing = [k for k in dpsresults.VERSIONS if k not in meta["versions"]]
    expect(not missing, f"meta.json: versions lacks {missing}")
    dev_of, steps_of = dpsresults.by_config(devices), dpsresults.by_config(steps)
    for r in runs:
        ng = int(r["ngpus"])
        mine = dev_of.get(r["config_id"], [])
        expect(len(mine) == ng, f"devices.csv: {len(mine)} rows for {r['config_id']}, want {ng}")
        if r["status"] != "ok":
            continue
        st = steps_of.get(r["config_id"], [])
        expect(len(st) == ng * int(r["steps"]),
               f"steps.csv: {len(st)} rows for {r['config_id']}, want {ng * int(r['steps'])}")
        for s in st:
            expect(float(s["step_ms"]) > 0, "steps.csv: a step took no time")
            expect(float(s["rank_step_ms"]) <= float(s["step_ms"]) + 1e-3,
                   "steps.csv: a rank slower than the step")
        expect(float(r["step_ms_p10"]) <= float(r["step_ms_median"]) <= float(r["step_ms_p90"]),
               "runs.csv: p10 <= median <= p90 does not hold")
    if meta["backend"] != "torch":  # PyTorch folders have no memory by category, no partition
        check_memory(folder, devices)
        check_partition(folder, runs, steps)
    return runs, devices, steps, phases, meta


PARTS = ("compute_ms", "overlap_ms", "comm_exposed_ms", "copies_ms", "wait_peer_ms", "idle_host_ms")


def check_partition(folder, runs, steps):
    """partition.csv: one row per rank of each ok configuration that stepped,
    its parts summing to its step_ms within 1 % (and 0.01 ms: the cells' rounding),
    step_ms the mean of steps.csv's, no part below -0.01 ms."""
    path = os.path.join(folder, "partition.csv")
    parts = dpsresults.by_config(read_table(path)) if os.path.exists(path) else {}
    step_of = dpsresults.by_config(steps)
    for r in runs:
        st = step_of.get(r["config_id"], [])
        if r["status"] != "ok" or not st:
            continue
        rows = parts.get(r["config_id"], [])
        expect(len(rows) == int(r["ngpus"]),
               f"partition.csv: {len(rows)} rows for {r['config_id']}, want {r['ngpus']}")
        mean = sum(float(s["step_ms"]) for s in st) / len(st)
        for p in rows:
            total, step = sum(float(p[c]) for c in PARTS), float(p["step_ms"])
            expect(abs(total - step) <= 0.01 * step + 0.01 and
                   abs(step - mean) <= 1e-3 * mean + 1e-3 and
                   all(float(p[c]) >= -0.01 for c in PARTS),
                   f"partition.csv: {r['config_id']} rank {p['rank']}: parts {total:.4f} ms, "
                   f"step {step:.4f} ms, steps.csv's mean {mean:.4f} ms: {p}")


def memory_at_peak(folder):
    """{(config_id, device): {category: bytes}} of memory.csv."""
    out = {}
    for m in read_table(os.path.join(folder, "memory.csv")):
        out.setdefault((m["config_id"], m["device"]), {})[m["category"]] = int(m["bytes_at_peak"])
    return out


def check_memory(folder, devices):
    """Each device's categories in memory.csv add up to its allocation peak."""
    if not os.path.exists(os.path.join(folder, "memory.csv")):
        expect(all(int(d["alloc_peak_bytes"]) == 0 for d in devices), "memory.csv is missing")
        return
    cats = memory_at_peak(folder)
    kinds = {"parameters", "gradients", "optimizer state", "activations", "inputs", "outputs",
             "loss buffers", "communication", "workspace", "other"}
    for m in read_table(os.path.join(folder, "memory.csv")):
        expect(m.get("kind", "other") in kinds and m.get("peak_phase", "setup"),
               f"memory.csv: {m['config_id']} device {m['device']} {m['category']}: kind "
               f"{m.get('kind')!r} is not one of {sorted(kinds)}, or no peak_phase")
    for d in devices:
        total = sum(cats.get((d["config_id"], d["device"]), {}).values())
        expect(total == int(d["alloc_peak_bytes"]),
               f"memory.csv: {d['config_id']} device {d['device']}: categories add up to {total}, "
               f"alloc_peak_bytes is {d['alloc_peak_bytes']}")


def png_size(path):
    """(width, height) of a PNG file; fails when it is not one."""
    with open(path, "rb") as f:
        head = f.read(24)
    expect(head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def run_case(label, fn, *args):
    """The exit status of one test case: what it returns (77: skipped) or 0;
    1, with FAIL and the reason on stderr, when an expectation fails or a
    results file does not read."""
    try:
        return fn(*args) or 0
    except (Failure, dpsresults.InputError) as e:
        print(f"FAIL {label}: {e}", file=sys.stderr)
        return 1


def run_cases(namespace):
    """Exits with the status of `FILE FIRST CASE ARGS...`: namespace's
    case_CASE(FIRST, *ARGS) through run_case (FIRST: the dpscale binary, or
    the folder the case reads). It exits itself, so that a caller cannot
    drop the status and pass every case."""
    cases = {k[5:]: v for k, v in namespace.items() if k.startswith("case_")}
    first, case, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    sys.exit(run_case(" ".join([case, *args]), cases[case], first, *args))


def missing_modules(names):
    """The modules of names the scripts' interpreter (PYTHON) lacks. Looked
    up, not imported: an import costs seconds."""
    if os.path.realpath(sys.executable) == os.path.realpath(PYTHON):
        return [n for n in names if importlib.util.find_spec(n) is None]
    look = ("import importlib.util as u, sys; "
            "print(' '.join(n for n in sys.argv[1:] if u.find_spec(n) is None))")
    done = subprocess.run([PYTHON, "-c", look, *names], capture_output=True, text=True)
    return done.stdout.split() if done.returncode == 0 else list(names)


def need_torch():
    """None when the scripts' interpreter has PyTorch, else 77 after saying why."""
    if missing_modules(["torch"]):
        print(f"skipped: PyTorch is not installed for {PYTHON} (scripts/setup.sh "
              f"--with-torch installs python3-torch)")
        return 77
    return None


def torch_ref(binary, *args, out, name, check_rc=0):
    """Runs torch_reference.py on the CPU into OUT/NAME, in a process of its own
    (a second group of gloo ranks started from one Python process, after a
    first, has been seen to hang)."""
    p = script("torch_reference.py", "--device", "cpu", "--dpscale", binary, "--out", out,
               "--name", name, "--timeout", "120", *args, timeout=300)
    if check_rc is not None and p.returncode != check_rc:
        raise Failure(f"torch_reference.py {' '.join(args)} --out {out} --name {name}: exit "
                      f"{p.returncode}, expected {check_rc}\nstdout:\n{p.stdout}\n"
                      f"stderr:\n{p.stderr}")
    return p


def losses(folder):
    """(config_id, [loss of each step]) of a folder with one configuration;
    every rank's row of a step must carry the same loss."""
    steps = dpsresults.read_csv(os.path.join(folder, "steps.csv"),
                                ["config_id", "step", "rank", "loss"])
    ids = {r["config_id"] for r in steps}
    expect(len(ids) == 1, f"{steps.path}: configurations {sorted(ids)}, expected one")
    by_step = {}
    for r in steps:
        k, v = dpsresults.integer(r, "step"), dpsresults.number(r, "loss")
        expect(by_step.setdefault(k, v) == v,
               f"{dpsresults.where(r)}: rank {r['rank']}'s loss {v} differs from another "
               f"rank's {by_step[k]} at step {k}")
    return ids.pop(), [by_step[k] for k in sorted(by_step)]


def rel_diff(a, b):
    return abs(a - b) / abs(b)


def params_diff(a, b):
    """max |a - b| / max |b| of two numpy arrays, as dpscale's check_max_rel_diff."""
    return float(abs(a - b).max() / abs(b).max())


def compare_losses(mine, ref, what):
    """The largest relative difference of two loss curves and its step;
    fails when they have other lengths."""
    expect(len(mine) == len(ref), f"{what}: {len(mine)} steps against {len(ref)}")
    k = max(range(len(ref)), key=lambda i: rel_diff(mine[i], ref[i]))
    return rel_diff(mine[k], ref[k]), k


def has_collectives(binary, name):
    """Whether the build has ddp's collectives `name` (dpscale info says);
    when not, says so and the caller skips (77)."""
    p = subprocess.run([binary, "info", "--backend", "host"], capture_output=True, text=True,
                       timeout=300)
    line = next((l for l in p.stdout.splitlines() if "ddp collectives:" in l), "")
    found = name in line.split("ddp collectives:")[-1].replace(",", " ").split()
    if not found:
        print(f"SKIP: this build has no {name} collectives ({line.strip() or 'dpscale info'}); "
              f"scripts/setup.sh installs what it needs")
    return found


def processes_mentioning(text):
    """The pids of the processes (but this one) whose command line holds text."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def children(pid):
    """The pids whose parent is pid, from /proc, the latest started last
    (by start time: pids wrap around, so the largest is not the newest)."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid, state, started = int(fields[1]), fields[0], int(fields[19])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and state != "Z":
            out.append((started, int(d)))
    return [p for _, p in sorted(out)]


def communicate(p, what, hang_s=300):
    """p's (stdout, stderr) once it ended; fails as hung past hang_s (a hang
    guard, far above any run of the tests on a busy machine under ASan)."""
    try:
        return p.communicate(timeout=hang_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise Failure(f"{what}: hung, still running after {hang_s} s") from None


def set_cells(path, match, values):
    """Rewrites the rows of a CSV whose cells match `match` ({col: value})
    with `values` ({col: value})."""
    lines = open(path).read().splitlines()
    head = lines[0].split(",")
    for k, line in enumerate(lines[1:], 1):
        cells = line.split(",")
        if all(cells[head.index(c)] == v for c, v in match.items()):
            for c, v in values.items():
                cells[head.index(c)] = str(v)
            lines[k] = ",".join(cells)
    write(path, "\n".join(lines) + "\n")


def free_port():
    """A TCP port nothing listens on now (the kernel's pick for 127.0.0.1):
    for a store or a launcher's rendezvous, far less likely to be taken by
    the time it is used than a random one."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_single_node(run_id):
    """torchrun's rendezvous for one node, as --standalone makes it but on a
    free port and under RUN_ID (--standalone's fixed port 29400 is shared by
    every test running meanwhile; the run id names this job's shared region,
    /dev/shm/dpscale-<port>-<run id>)."""
    return ["--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
            f"localhost:{free_port()}", "--rdzv_id", run_id]
