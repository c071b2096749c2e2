#!/usr/bin/env python3
"""Every command of the ```sh blocks of README.md and docs/*.md, run as a
user pastes it, on the host backend, reduced to a few steps, in a temporary
folder holding build/src/dpscale (the binary under test), bench/ and
scripts/. RULES says how each command runs or why it cannot run here (it is
then listed as skipped); a command no rule covers fails, which keeps the
pages and the table in step. One test a page (`readme commands PAGE`), so
that the pages run beside each other; a command an earlier page holds runs
there only.
Usage: test_readme_commands.py DPSCALE PAGE; exit 0 pass, 1 fail."""
import glob
import os

from listing import DPSCALE, LONG, NOSAN, exit_if_listing, test

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pages(root=ROOT):
    """README.md and docs/*.md with a ```sh block, in the order their commands are first run."""
    every = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [p for p in every if "```sh\n" in open(p, encoding="utf-8").read()]


TESTS = [test(f"readme commands {os.path.basename(p)}", DPSCALE, os.path.basename(p),
              suite=NOSAN, timeout=600, priority=LONG) for p in pages()]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"  # the scripts' interpreter (numpy, matplotlib, torch)
STEPS = "--steps 2 --warmup 0"
TOKENS = "--tokens 4"  # medium and larger presets: fewer rows per sample, the same layers
SIZES = "--sizes 64K"  # a sweep's link matrix: one copy size a path
TIMEOUT_S = 180


def run(add="", rc=(0,), out=None, needs=None, instead=None, latest=False):
    """A rule that runs the command with ADD appended (or INSTEAD in its
    place), expecting an exit status in RC and OUT in its output; NEEDS names
    what must be installed (torch, mpirun); LATEST: results/latest must exist."""
    return {"kind": "run", "add": add, "rc": rc, "out": out, "needs": needs, "instead": instead,
            "latest": latest}


def skip(reason):
    return {"kind": "skip", "reason": reason}


def refuse(reason):
    """A command known to fail as written: the page must change."""
    return {"kind": "refuse", "reason": reason}


DPS = r"build/src/dpscale"
ENV = r"(\w+=\S+ )*"  # variables set before the command
BIG = r".*--model \S*(medium|resnet50|gpt2|bert-large).*"
# (pattern, rule): the first pattern that matches the whole command decides
RULES = [
    (r"scripts/setup\.sh", skip("installs packages and configures build/: done for the build "
                                "under test")),
    (r"meson test -C build", skip("the whole test suite, this test among them")),
    (r"ninja -C build bench", skip("the default suite and its charts, about a minute here; "
                                   "bench-quick runs the same scripts/bench.sh")),
    # the bench-quick target's command (meson.build), here instead of in the checkout
    (r"ninja -C build bench-quick",
     run(instead=f"scripts/bench.sh {DPS} bench/quick.suite", out="bench: results in")),
    (r"ninja -C build regress", skip("builds the base commit in a worktree (minutes): "
                                     "tests 'regress worktree', 'regress planted'")),
    # the hang found by the watchdog at step 3, not a slow step before it: --timeout 30 (the
    # last given counts), far above a step's time on a loaded machine, for the page's 5
    (DPS + r" run .*--inject-fault 1:3:hang --timeout 5.*",
     run(add="--steps 2 --warmup 2 --timeout 30", rc=(1,),
         out="step 3 exceeded --timeout 30 s (rank 1 hangs, injected by --inject-fault 1:3:hang)")),
    (DPS + r" run .*--device-mem 8M.*", run(add=STEPS, rc=(1,), out="out of memory")),
    (DPS + r" run .*--model mine\.model.*", skip("a user's own model file: test 'model run check' "
                                                 "runs model files so")),
    (DPS + r" run .*--model resnet50 .*--batch 4( .*)?", run(add=STEPS)),  # the real model, 2 samples a rank
    (DPS + r" sweep " + BIG, run(add=f"{STEPS} {TOKENS} {SIZES}")),
    (DPS + r" run " + BIG, run(add=f"{STEPS} {TOKENS}")),
    (DPS + r" sweep( .*)?", run(add=f"{STEPS} {SIZES}")),
    (DPS + r" (run|comm-bench)( .*)?", run(add=STEPS)),
    (DPS + r" links( .*)?", run(add="--steps 2")),
    # its sweeps and micro-benchmarks reduced as the commands above; the model's rows fewer
    (DPS + r" predict --measure .*", run(add=f"{STEPS} {TOKENS}", out="# measure 7/7")),
    (DPS + r" (info|predict|--help)( .*)?", run()),
    (r"torchrun (?!.*-r 2 -t 2 ).*", refuse("Debian's torchrun (PyTorch 1.13) under Python 3.11 "
                                            "needs -r 2 -t 2")),
    (r"torchrun .*--nnodes 2 .*", skip("two hosts (node0 and another): test 'launch torchrun "
                                       "nodes' runs two agents on one")),
    (r"torchrun -r 2 -t 2 --standalone .*--no_python " + DPS + " run .*",
     run(add=STEPS, needs="torch")),
    (r"torchrun .*-r 2 -t 2 scripts/torch_reference\.py .*", run(add=STEPS, needs="torch")),
    (ENV + r"mpirun .*-H \S+,\S+ .*", skip("two hosts (-H node0:4,node1:4)")),
    (ENV + r"mpirun (?!.*--allow-run-as-root --oversubscribe ).*",
     refuse("Open MPI refuses root without --allow-run-as-root, and more ranks than cores "
            "without --oversubscribe")),
    (ENV + r"mpirun .*" + DPS + " run .*", run(add=STEPS, needs="mpirun")),
    (ENV + r"srun .*", skip("Slurm (srun): no cluster here")),
    (r"export MASTER_ADDR=\$\(scontrol .*", skip("Slurm (scontrol): an sbatch script's line")),
    (r"scripts/plot\.py results/latest", run(latest=True, out="charts in")),
    # exit 1: a regression found (a baseline of another day); 3: no baseline of this machine
    (r"scripts/regress\.sh \S+ --stored",
     run(add="--suite bench/quick.suite", rc=(0, 1, 3), out="stored baseline")),
    # ROUNDS and SUITE: two rounds of the quick suite instead of six of bench/ci.suite
    (r"scripts/ab\.sh old/dpscale " + DPS, run(add="2 bench/quick.suite", rc=(0, 1),
                                                out="dpscale performance comparison")),
    (r"scripts/profile\.sh .*", skip("Nsight Systems (nsys) on a GPU: tests 'profile sh', "
                                     "'device-check profile'")),
    (r"scripts/device-check\.sh .*", skip("the GPU checks: needs a GPU")),
    (r"(python3 )?scripts/torch_reference\.py --mode dp --gpus [2-9].*",
     skip("nn.DataParallel over several devices needs CUDA")),
    (r"(python3 )?scripts/torch_reference\.py .*--model resnet50.*",
     skip("the resnet50 preset in PyTorch is for GPUs: on 4 CPU ranks, one step of one sample "
          "each takes 20 to 40 s here (--device cpu with the small preset runs)")),
    (r"(python3 )?scripts/torch_reference\.py --module mypkg\.\S+ .*",
     skip("a user's own package: test 'torch module' runs tests/model_examples.py's module so")),
    (r"scripts/plot\.py results/mine --torch results/mine-torch",
     skip("the folders of a user's own package (test 'torch module' draws such a pair)")),
    (r"(python3 )?scripts/torch_reference\.py .*", run(add=STEPS, needs="torch")),
    (r"/usr/bin/python3 scripts/model_export\.py torchvision\.models\.resnet\w+ .*",
     run(needs="torchvision", out="lines in")),
    (r"/usr/bin/python3 scripts/model_export\.py dpstools\.reference_models:\w+ .*",
     skip("GPT-2 and BERT-large at full size, a minute each on the CPU: test 'model export "
          "transformer' exports a small GPT the same way")),
    (r"/usr/bin/python3 scripts/model_export\.py mypkg\.models:build .*",
     skip("a user's own package: test 'model export refuses' names a module that is not there")),
]


def page_commands(path):
    """The commands of PATH's ```sh blocks: continuations joined, comments,
    blank lines and the brackets around optional arguments dropped."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*", "", line)
            line = re.sub(r"\[(-[^\]]*)\]", r"\1", line)
            found += [" ".join(part.split()) for part in line.split("&&") if part.strip()]
    return found


def rule_for(cmd):
    for pattern, rule in RULES:
        if re.fullmatch(pattern, cmd):
            return rule
    return None


def missing(needs):
    """Why a command's requirement is absent here, or None."""
    if needs == "torch" and subprocess.run([PYTHON, "-c", "import torch"],
                                           capture_output=True).returncode != 0:
        return "no PyTorch (python3-torch; scripts/setup.sh --with-torch)"
    if needs == "torchvision" and subprocess.run([PYTHON, "-c", "import torchvision"],
                                                 capture_output=True).returncode != 0:
        return "no torchvision (python3-torchvision; scripts/setup.sh --with-torch)"
    if needs == "mpirun" and not shutil.which("mpirun"):
        return "no mpirun (openmpi-bin; scripts/setup.sh --with-torch)"
    return None


def workdir(tmp, dpscale, root):
    """TMP as a checkout: bench/ and scripts/ copied, build/src/dpscale and
    old/dpscale (ab.sh's old binary) the binary under test."""
    for d in ("bench", "scripts"):
        shutil.copytree(os.path.join(root, d), os.path.join(tmp, d), symlinks=True)
    for link in ("build/src/dpscale", "old/dpscale"):
        os.makedirs(os.path.dirname(os.path.join(tmp, link)), exist_ok=True)
        os.symlink(os.path.abspath(dpscale), os.path.join(tmp, link))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment():
    """The host backend even where a GPU is visible, the scripts' interpreter
    first on PATH, and a rendezvous port of the launched ranks' own."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", DPSCALE_PORT=str(free_port()))
    env["PATH"] = os.path.dirname(PYTHON) + os.pathsep + env.get("PATH", "")
    return env


def shell(cmd, tmp):
    p = subprocess.run(["bash", "-c", cmd], cwd=tmp, env=environment(), capture_output=True,
                       text=True, timeout=TIMEOUT_S)
    return p.returncode, p.stdout + p.stderr


def not_executable(cmd, tmp):
    """A script the command starts by its path that would not start."""
    first = cmd.split()[0]
    path = os.path.join(tmp, first)
    if "/" in first and os.path.isfile(path) and not os.access(path, os.X_OK):
        return f"{first} is not executable"
    return None


def ensure_latest(tmp):
    """results/latest, made by the quick suite when no command before made it."""
    if not os.path.exists(os.path.join(tmp, "results", "latest")):
        first = f"{DPS} sweep bench/quick.suite {STEPS} --no-links"
        print(f"  (results/latest first: {first})")
        shell(first, tmp)


def execute(cmd, rule, tmp):
    """Runs one command under its rule; returns a failure or None."""
    problem = not_executable(cmd, tmp)
    if problem:
        return problem
    if rule["latest"]:
        ensure_latest(tmp)
    line = rule["instead"] or (cmd + " " + rule["add"]).strip()
    if line != cmd:
        print(f"  as: {line}")
    start = time.monotonic()
    try:
        rc, output = shell(line, tmp)
    except subprocess.TimeoutExpired:
        return f"ran past {TIMEOUT_S} s"
    print(f"  exit {rc} in {time.monotonic() - start:.1f} s")
    if rc not in rule["rc"]:
        return f"exit {rc}, expected {' or '.join(map(str, rule['rc']))}:\n{output[-3000:]}"
    if rule["out"] and rule["out"] not in output:
        return f"no {rule['out']!r} in its output:\n{output[-3000:]}"
    return None


def check(cmd, where, tmp):
    """One command: (status, detail), status one of ran, skipped, failed."""
    rule = rule_for(cmd)
    if rule is None:
        return "failed", (f"{where} command not covered: {cmd} (add a rule to RULES in "
                          f"{os.path.basename(__file__)})")
    if rule["kind"] == "refuse":
        return "failed", f"fails as written: {rule['reason']}"
    why = rule["reason"] if rule["kind"] == "skip" else missing(rule["needs"])
    if why:
        return "skipped", why
    problem = execute(cmd, rule, tmp)
    return ("failed", problem) if problem else ("ran", "")


def main(dpscale, name):
    """The commands of the page NAME (README.md or a file of docs/) that no
    page before it holds."""
    paths = pages()
    names = [os.path.basename(p) for p in paths]
    if name not in names:
        print(f"test_readme_commands.py: no page {name}; the pages are {', '.join(names)} "
              f"(reconfigure the build when a page is added or removed)")
        return 1
    page = paths[names.index(name)]
    seen = {c for p in paths[:names.index(name)] for c in page_commands(p)}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir(tmp, dpscale, ROOT)
        for cmd in page_commands(page):
            if cmd in seen:
                continue
            seen.add(cmd)
            print(f"{name}: {cmd}")
            status, detail = check(cmd, name, tmp)
            if status != "ran":
                print(f"  {status.upper()}: {detail}")
            results.append((status, cmd, detail))
    return report(results)


def report(results):
    for status in ("skipped", "failed"):
        rows = [r for r in results if r[0] == status]
        print(f"\n{len(rows)} {status}:" if rows else f"\n0 {status}")
        for _, cmd, detail in rows:
            print(f"  {cmd}\n    {detail.splitlines()[0]}")
    ran = sum(1 for r in results if r[0] == "ran")
    print(f"\n{ran} ran")
    return 1 if any(r[0] == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
