"""The regression gate: the base built beside the head, both run in interleaved rounds, judged.

Builds the base commit beside the build (a git worktree and a Meson build
in BUILD/regress-base/<commit>/, kept for the next time), runs the suite
with the base and the head binary interleaved, round after round, and
compares them with compare.py as paired rounds until every configuration is
decided, the budget is spent, or the rounds asked for (--rounds) have run;
or compares one run with a stored baseline (bench/baselines/<machine>/), or
adds one to it. regress.py's work (its options are `a` here), and ab.sh's
through it.
"""
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
PYTHON = sys.executable or "python3"  # compare.py runs itself again where this lacks a package
INCONCLUSIVE = 3  # the exit status of a gate that stopped with configurations undecided


class GateError(Exception):
    """What stops the gate before it can judge: one line, exit 2."""


def log(msg):
    print(f"regress: {msg}", flush=True)


def git(*args):
    p = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    if p.returncode:
        raise GateError(f"git {' '.join(args)}: {p.stderr.strip() or 'failed'}")
    return p.stdout.strip()


def git_ok(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True).returncode == 0


def main_branch():
    try:
        return git("symbolic-ref", "--short", "refs/remotes/origin/HEAD")
    except GateError:
        pass
    for ref in ("origin/main", "main", "origin/master", "master"):
        if git_ok("rev-parse", "--verify", "--quiet", ref + "^{commit}"):
            return ref
    raise GateError("no main branch (origin/main, main, origin/master, master) to take the "
                    "base from; name one with --base REF")


def choose_base(ref):
    """(commit, why) of the base: --base REF, else the merge-base with the
    main branch; on the main branch itself, the commit before (or HEAD when
    the working tree has changes)."""
    if ref:
        return git("rev-parse", "--verify", ref + "^{commit}"), f"--base {ref}"
    branch = main_branch()
    try:
        base = git("merge-base", "HEAD", branch)
    except GateError as e:
        raise GateError(f"{e}; in a shallow clone fetch the history (actions/checkout: "
                        f"fetch-depth: 0), or give --base REF, --base-binary or --stored") from None
    if base != git("rev-parse", "HEAD"):
        return base, f"the merge-base with {branch}"
    if git("status", "--porcelain", "--untracked-files=no"):
        return base, "HEAD (the working tree has changes)"
    return git("rev-parse", "--verify", "HEAD^"), f"HEAD^ (HEAD is on {branch})"


def head_options(build_dir):
    """-Dname=value of the head build's own (project) options."""
    path = os.path.join(build_dir, "meson-info", "intro-buildoptions.json")
    try:
        with open(path) as f:
            options = json.load(f)
    except (OSError, ValueError) as e:
        raise GateError(f"{path}: cannot read the head build's options ({e}); "
                        f"is {build_dir} a Meson build folder?")
    out = {}
    for o in options:
        if o.get("section") != "user":
            continue
        v = o["value"]
        v = ",".join(v) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else v
        out[o["name"]] = str(v)
    return out


def base_option_names(src):
    names = set()
    for name in ("meson_options.txt", "meson.options"):
        path = os.path.join(src, name)
        if os.path.exists(path):
            names |= set(re.findall(r"option\(\s*'([^']+)'", open(path).read()))
    return names


def build_base(commit, build_dir):
    """The base commit's dpscale, built in BUILD/regress-base/<commit>/ with
    the head build's options (those the base has); built once per commit."""
    cache = os.path.join(os.path.realpath(build_dir), "regress-base", commit[:12])
    src, bld = os.path.join(cache, "src"), os.path.join(cache, "build")
    binary = os.path.join(bld, "src", "dpscale")
    if os.access(binary, os.X_OK):
        log(f"base {commit[:12]}: built before, in {bld}")
        return binary
    t0 = time.monotonic()
    git("worktree", "prune")
    if os.path.exists(cache):
        shutil.rmtree(cache)
    os.makedirs(cache)
    git("worktree", "add", "--detach", "--force", src, commit)
    options = head_options(build_dir)
    keep = base_option_names(src)
    args = [f"-D{k}={v}" for k, v in sorted(options.items()) if k in keep]
    logfile = os.path.join(cache, "build.log")
    with open(logfile, "w") as out:
        for cmd in (["meson", "setup", bld, src, *args], ["ninja", "-C", bld, "src/dpscale"]):
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise GateError(f"cannot build the base commit {commit[:12]} ({' '.join(cmd[:2])} "
                                f"failed; see {logfile}); compare with a stored baseline: "
                                f"--stored")
    log(f"base {commit[:12]}: built in {time.monotonic() - t0:.0f} s, in {bld}")
    return binary


def sweep(binary, suite, out, name, extra, logf):
    """One round of one side; a failed configuration is the comparison's
    business (exit 1), a refused command line is not."""
    cmd = [binary, "sweep", suite, "--no-links", "--out", out, "--name", name, *extra]
    p = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT)
    if p.returncode not in (0, 1):
        raise GateError(f"{' '.join(cmd)}: exit {p.returncode} (see {logf.name})")


def compare(base, head, json_path, extra, report=None, quiet=True, stopped=None):
    cmd = [PYTHON, os.path.join(ROOT, "scripts", "compare.py"), base, head, "--json", json_path,
           *extra, *(["--stopped", stopped] if stopped else [])]
    if report:
        cmd += ["--markdown", report + ".md", "--junit", report + ".xml", "--plot", report + ".png"]
    p = subprocess.run(cmd, capture_output=quiet, text=True)
    if p.returncode == 2:
        raise GateError(f"compare.py refused: {(p.stderr or '').strip()}")
    with open(json_path) as f:
        return p.returncode, json.load(f)


def run_rounds(a, base_bin, head_bin, out, extra, t0):
    """Rounds until decided, --max-rounds or the budget (counted from t0,
    the gate's start), or exactly --rounds (none judged before the last);
    returns the rounds run and, unless every configuration was decided, why
    no more were run (--rounds: that they were the rounds asked for)."""
    done, decided = 0, False
    slow = ["--inject-slowdown", str(a.inject_slowdown)] if a.inject_slowdown else []
    steps = ["--steps", str(a.steps)] if a.steps else []
    with open(os.path.join(out, "sweeps.log"), "w") as logf:
        while done < (a.rounds or a.max_rounds):
            r0 = time.monotonic()
            sides = [("base", base_bin, steps), ("head", head_bin, steps + slow)]
            for side, binary, opts in sides if done % 2 == 0 else sides[::-1]:
                sweep(binary, a.suite, os.path.join(out, side), f"run-{done + 1:03d}", opts, logf)
            done += 1
            spent, per_round = time.monotonic() - t0, time.monotonic() - r0
            if a.rounds:
                log(f"round {done} of {a.rounds}, {spent:.0f} s spent")
                continue
            if done >= a.min_rounds:
                _, res = compare(os.path.join(out, "base"), os.path.join(out, "head"),
                                 os.path.join(out, "progress.json"), extra)
                undecided = res.get("undecided", 0)
                log(f"round {done}: {undecided} configuration(s) undecided, {spent:.0f} s spent")
                if not undecided:
                    decided = True
                    break
            if spent + per_round > a.budget_min * 60:
                break
    if decided:
        return done, None
    if a.rounds:
        return done, f"--rounds {a.rounds} run"
    why = (f"--max-rounds {a.max_rounds} reached" if done >= a.max_rounds else
           f"--budget-min {a.budget_min:g} reached after {spent:.0f} s")
    log(f"stopped after {done} rounds ({why}) with configurations undecided: see the WARN and "
        f"NOISY rows for the rounds they need")
    return done, why


def gate(a, extra):
    t0 = time.monotonic()
    head_bin = os.path.realpath(a.dpscale)
    if a.base_binary:
        base_bin = os.path.realpath(a.base_binary)
        log(f"base: {base_bin}; head: {head_bin}")
    else:
        commit, why = choose_base(a.base)
        log(f"base: {commit[:12]}, {why}; head: {head_bin}")
        base_bin = build_base(commit, os.path.dirname(os.path.dirname(head_bin)))
    out = new_out(a.out, make=True)
    rounds, stopped = run_rounds(a, base_bin, head_bin, out, extra, t0)
    rc, res = compare(os.path.join(out, "base"), os.path.join(out, "head"),
                      os.path.join(out, "regression.json"), extra,
                      report=os.path.join(out, "regression"), quiet=False, stopped=stopped)
    log(f"{rounds} rounds; report in {out}/regression.{{md,xml,json,png}}")
    return inconclusive(rc, res, extra, a.rounds)


def inconclusive(rc, res, extra, rounds=None):
    """compare.py's exit status, or INCONCLUSIVE where it passed with a
    step time undecided: a gate that could not decide must not pass
    silently (--warn-only: 0); rounds: --rounds, where the gate ran them."""
    if rc != 0 or res.get("verdict") != "INCONCLUSIVE":
        return rc
    status = 0 if "--warn-only" in extra else INCONCLUSIVE
    more = "--rounds" if rounds else "--budget-min, --max-rounds"
    fix = (f"the undecided rows say about how many rounds would decide them ({more}; a quieter "
           f"runner)" if res.get("paired") else
           "a quieter runner, or the default gate (the base run beside the head), decides it")
    log(f"{res.get('verdict_line')}: exit {status}{' (--warn-only)' if not status else ''}; {fix}")
    return status


def stamp():
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname().split('.')[0]}"


def new_out(parent, make):
    """A results path under parent named for now that nothing holds yet
    (regress-STAMP, then regress-STAMP-2, ...: two gates started within a
    second keep apart); made as a folder when make."""
    os.makedirs(parent, exist_ok=True)
    base = os.path.join(parent, f"regress-{stamp()}")
    for i in range(1, 1000):
        out = base if i == 1 else f"{base}-{i}"
        if os.path.lexists(out + ".log"):
            continue
        try:
            if make:
                os.mkdir(out)
            elif os.path.lexists(out):
                continue
            return out
        except FileExistsError:
            continue
    raise RuntimeError(f"{base}: 999 results folders of this second already")


def machine_key(meta_path):
    with open(meta_path) as f:
        m = json.load(f)
    dev = (m.get("devices") or [{}])[0].get("name", "unknown").replace("emulated device on ", "")
    return re.sub(r"[^a-z0-9]+", "-", f"{m.get('backend', 'unknown')}-{dev}".lower()).strip("-")


def commit_of(describe):
    """The full commit a git_describe names ('c338c34', 'v1-3-gc338c34',
    '…-dirty'), where this checkout has it; '' otherwise."""
    name = describe[:-len("-dirty")] if describe.endswith("-dirty") else describe
    name = re.sub(r"^.*-g(?=[0-9a-f]{4,}$)", "", name)
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", name + "^{commit}"],
                       capture_output=True, text=True)
    return p.stdout.strip() if name and p.returncode == 0 else ""


def version_of(binary):
    """'dpscale 0.1.0 (c338c34)': what a dpscale binary says it is."""
    p = subprocess.run([binary, "--version"], capture_output=True, text=True)
    if p.returncode or not p.stdout.startswith("dpscale "):
        raise GateError(f"{binary} --version: exit {p.returncode}, {p.stdout.strip()!r}, not "
                        f"'dpscale VERSION (COMMIT)'; record a baseline with a dpscale build")
    return p.stdout.strip()


def stamp_baseline(run, version, suite):
    """baseline.json of a baseline run: the dpscale that recorded it (its
    --version, the commit its git_describe names), the suite and when."""
    with open(os.path.join(run, "meta.json")) as f:
        meta = json.load(f)
    describe = meta.get("git_describe", "")
    record = {"recorded_by": version, "dpscale_version": meta.get("dpscale_version", ""),
              "git_describe": describe, "git_commit": commit_of(describe),
              "suite": os.path.relpath(os.path.realpath(suite), ROOT),
              "recorded_at": meta.get("start_time", "")}
    with open(os.path.join(run, "baseline.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    if describe.endswith("-dirty"):
        log(f"warning: {version} was built from a working tree with changes: no commit "
            f"reproduces this baseline; commit first, rebuild and record it again")


def recorded_by(run_dir, meta):
    """Who recorded a baseline run: its baseline.json's stamp, else meta.json's version."""
    try:
        with open(os.path.join(run_dir, "baseline.json")) as f:
            return json.load(f)["recorded_by"]
    except (OSError, ValueError, KeyError):
        return f"dpscale {meta.get('dpscale_version', '?')} ({meta.get('git_describe', '?')})"


def staleness(base_dir):
    """'recorded 2026-11-30T02:06:26Z (3 days ago) on HOST by dpscale 0.1.0
    (c338c34), 3 run(s)' of the newest baseline run."""
    runs = sorted(d for d in os.listdir(base_dir) if d.startswith("run-"))
    with open(os.path.join(base_dir, runs[-1], "meta.json")) as f:
        m = json.load(f)
    when = m.get("start_time", "")
    try:
        t = datetime.datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc)
        age = datetime.datetime.now(datetime.timezone.utc) - t
        ago = f"{age.days} days ago" if age.days else f"{age.seconds // 3600} hours ago"
    except ValueError:
        ago = "at an unknown time"
    by = recorded_by(os.path.join(base_dir, runs[-1]), m)
    return f"recorded {when or '?'} ({ago}) on {m.get('host', '?')} by {by}, {len(runs)} run(s)"


def stored(a, extra):
    """One run compared with bench/baselines/<machine>/ (or added to it)."""
    out = new_out(a.out, make=False)
    slow = ["--inject-slowdown", str(a.inject_slowdown)] if a.inject_slowdown else []
    with open(out + ".log", "w") as logf:
        sweep(os.path.realpath(a.dpscale), a.suite, os.path.dirname(out), os.path.basename(out),
              slow, logf)
    key = machine_key(os.path.join(out, "meta.json"))
    base = os.path.join(ROOT, "bench", "baselines", key)
    if a.update_baseline:
        by = version_of(os.path.realpath(a.dpscale))
        run = os.path.join(base, f"run-{datetime.datetime.now():%Y%m%d-%H%M%S}")
        os.makedirs(run)
        for name in ("runs.csv", "steps.csv", "devices.csv", "meta.json"):
            shutil.copy(os.path.join(out, name), run)
        stamp_baseline(run, by, a.suite)
        for old in sorted(d for d in os.listdir(base) if d.startswith("run-"))[:-3]:
            shutil.rmtree(os.path.join(base, old))
        log(f"baseline {key}: {os.path.basename(run)} recorded by {by}; "
            f"{len(os.listdir(base))} run(s) in bench/baselines/{key} (commit them)")
        return 0
    if not os.path.isdir(base) or not any(d.startswith("run-") for d in os.listdir(base)):
        log(f"INCONCLUSIVE: no stored baseline for this machine ({key}) in bench/baselines/: "
            f"exit {INCONCLUSIVE}; make one from a run you trust: scripts/regress.sh "
            f"{a.dpscale} --update-baseline")
        return 0 if "--warn-only" in extra else INCONCLUSIVE
    log(f"stored baseline bench/baselines/{key}: {staleness(base)}; another day or machine "
        f"drifts by more than a change: prefer the default, base built beside head")
    rc, res = compare(base, out, os.path.join(out, "regression.json"), extra,
                      report=os.path.join(out, "regression"), quiet=False)
    log(f"report in {out}/regression.{{md,xml,json,png}}")
    return inconclusive(rc, res, extra)
