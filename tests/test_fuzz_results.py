#!/usr/bin/env python3
"""Fuzzing of the results readers: copies of the fixture folders, each broken
by one to three random mutations (cells replaced by other text, bytes, empty,
NaN, infinite, negative or huge values; rows removed, repeated or swapped;
files cut mid-row; bytes that are not UTF-8; a byte-order mark; CRLF line
ends; a file turned into a folder or deleted; meta.json's keys of the wrong
type), are given to compare.py (against the intact folder both ways, and
among a baseline's runs) and to plot.py (alone, and beside the intact folder
with --torch either way), in this process. Each must end with exit 0, 1 or 2
and no traceback. plot.py renders its PNGs for every RENDER_EVERY-th
mutation and closes its figures unrendered otherwise, and is not run where
it would read the intact files (rendering is most of the time).
Usage: test_fuzz_results.py SEED [COUNT [N]]: COUNT mutations (300), or only
mutation N; a failure prints the seed and mutation that reproduce it. The
mutations are the seed's alone, and so is the order in which the scripts
meet them: the test runs with string hashing fixed (PYTHONHASHSEED=0), so
that no set or dict the scripts go through is ordered by chance.
Exit 0 pass, 1 fail."""
import contextlib
import filecmp
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # this process again with string hashing fixed, before the scripts are imported
    os.execve(sys.executable, [sys.executable, *sys.argv], dict(os.environ, PYTHONHASHSEED="0"))

from helpers import FIXTURES, copy_fixture  # noqa: E402
# scripts/compare.py and plot.py (scripts/ is on PYTHONPATH)
import compare  # noqa: E402
import plot  # noqa: E402
from dpstools import charts  # noqa: E402

FOLDERS = ["ci-host", "results-host", "mixed-host", "accum-host"]
RENDER_EVERY = 10  # plot.py renders the charts of every tenth mutation (rendering is slow)
CELLS = ["", "nan", "NaN", "inf", "-inf", "-5", "0", "-0", "0.0", "1e308", "1e400", "1e-300",
         "18446744073709551616", "99999999999999999999999", "1.5", "abc", "true", "[]", '"',
         "0x10", " 1", "1_0", "ok", "dp", "ddp", "oom", "x" * 200000]
JSON_VALUES = [None, 5, -1, 0, 1.5, 1e308, float("nan"), "x", "", [], {}, [1], ["x"],
               {"a": 1}, True, [{"name": 5}], {"driver": []}]
META_PATHS = [["devices"], ["devices", 0], ["devices", 0, "name"], ["devices", 0, "index"],
              ["versions"], ["versions", "driver"], ["versions", "backend"], ["backend"],
              ["emulated"], ["note"], ["topology"], ["memory"], ["command_line"]]


def csv_files(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".csv")
                  and os.path.isfile(os.path.join(folder, f)))


def any_file(rng, folder):
    names = sorted(os.listdir(folder))
    return rng.choice(names) if names else None


def lines_of(path):
    with open(path, "rb") as f:
        return f.read().split(b"\n")


def put_lines(path, lines):
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))


def some_csv(rng, folder):
    files = csv_files(folder)
    return rng.choice(files) if files else None


# ---- mutations: each changes a folder and says what it did, or returns None -------

def on_lines(rng, folder, change):
    """change(rng, lines) edits the lines of a CSV file in place and says
    what it did (after the file's name)."""
    name = some_csv(rng, folder)
    if not name:
        return None
    path = os.path.join(folder, name)
    lines = lines_of(path)
    what = change(rng, lines)
    put_lines(path, lines)
    return f"{name}{what}"


def cell(rng, folder):
    def change(rng, lines):
        i = rng.randrange(len(lines))
        fields = lines[i].split(b",")
        k = rng.randrange(len(fields))
        value = rng.choice(CELLS).encode() if rng.random() < 0.8 else \
            bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        fields[k] = value
        lines[i] = b",".join(fields)
        return f":{i + 1} field {k + 1} = {value[:20]!r}"
    return on_lines(rng, folder, change)


def drop_line(rng, folder):
    def change(rng, lines):
        i = rng.randrange(len(lines))
        del lines[i]
        return f": line {i + 1} removed"
    return on_lines(rng, folder, change)


def repeat_line(rng, folder):
    def change(rng, lines):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines.insert(j, lines[i])
        return f": line {i + 1} repeated at line {j + 1}"
    return on_lines(rng, folder, change)


def swap_lines(rng, folder):
    def change(rng, lines):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return f": lines {i + 1} and {j + 1} swapped"
    return on_lines(rng, folder, change)


def on_bytes(rng, folder, change):
    """change(rng, data) -> (new bytes, what it did) of any regular file."""
    name = any_file(rng, folder)
    path = os.path.join(folder, name or "")
    if not name or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        data, what = change(rng, f.read())
    with open(path, "wb") as f:
        f.write(data)
    return f"{name}: {what}"


def cut(rng, folder):
    def change(rng, data):
        at = rng.randrange(len(data) + 1)
        return data[:at], f"cut at byte {at} of {len(data)}"
    return on_bytes(rng, folder, change)


def insert_bytes(rng, folder):
    def change(rng, data):
        at = rng.randrange(len(data) + 1)
        junk = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\r", b"\n", b'"', b","])
        return data[:at] + junk + data[at:], f"{junk!r} inserted at byte {at}"
    return on_bytes(rng, folder, change)


def bom(rng, folder):
    return on_bytes(rng, folder, lambda rng, data: (b"\xef\xbb\xbf" + data, "byte-order mark"))


def remove_any(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def to_folder(rng, folder):
    name = any_file(rng, folder)
    if not name:
        return None
    remove_any(os.path.join(folder, name))
    os.mkdir(os.path.join(folder, name))
    return f"{name}: a folder"


def delete(rng, folder):
    name = any_file(rng, folder)
    if not name:
        return None
    remove_any(os.path.join(folder, name))
    return f"{name}: deleted"


def meta_value(rng, folder):
    path = os.path.join(folder, "meta.json")
    try:
        with open(path) as f:
            meta = json.load(f)
        keys = rng.choice(META_PATHS)
        box = meta
        for k in keys[:-1]:
            box = box[k]
        value = rng.choice(JSON_VALUES)
        box[keys[-1]] = value
    except (OSError, ValueError, LookupError, TypeError, RecursionError):
        return None
    with open(path, "w") as f:
        json.dump(meta, f)
    return f"meta.json: {'.'.join(map(str, keys))} = {value!r}"


def meta_text(rng, folder):
    text = rng.choice(["[]", "null", "5", '"x"', "{", "", "[" * 100000, '{"devices": 5}',
                       "NaN", '{"a": 1e999}'])
    path = os.path.join(folder, "meta.json")
    if os.path.isdir(path):
        return None
    with open(path, "w") as f:
        f.write(text)
    return f"meta.json = {text[:20]!r}"


def crlf(rng, folder):
    name = some_csv(rng, folder)
    if not name:
        return None
    path = os.path.join(folder, name)
    put_lines(path, [line + b"\r" for line in lines_of(path)])
    return f"{name}: CRLF line ends"


MUTATIONS = [cell] * 8 + [drop_line, repeat_line, swap_lines, cut, insert_bytes, bom, to_folder,
                          delete, meta_value, meta_value, meta_text, crlf]


# ---- running the scripts in this process --------------------------------------------

def call(main, argv):
    """(exit status, stderr) of a script's main(argv); a traceback when it raised."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
        except Exception:
            traceback.print_exc()
            rc = "an exception"
    return rc, err.getvalue()


SAVE = charts.save  # writes the PNG


def unrendered(plt, fig, out, name):
    """charts.save without the rendering that takes most of plot.py's time."""
    plt.close(fig)
    return os.path.join(out, name)


def runs(intact, broken, tmp, n):
    """(command, exit status, stderr) of each script run on a broken folder:
    compare.py against the intact one both ways and with the broken one among
    a baseline's runs; plot.py drawing it, or setting it beside the intact one
    as --torch, or the other way round (n chooses)."""
    outs = ["--json", os.path.join(tmp, "r.json"), "--markdown", os.path.join(tmp, "r.md"),
            "--junit", os.path.join(tmp, "r.xml")]
    pool = os.path.join(tmp, "pool")
    shutil.copytree(intact, os.path.join(pool, "run-1"))
    shutil.copytree(broken, os.path.join(pool, "run-2"), symlinks=True)
    for argv in ([intact, broken, *outs], [broken, intact], [pool, intact]):
        yield ("compare.py " + " ".join(argv), *call(compare.main, argv))
    if same_files(intact, broken, but="buckets.csv"):
        return  # nothing plot.py reads (every file but buckets.csv) was broken
    argv = [[broken], [broken, "--torch", intact], [intact, "--torch", broken]][n % 3] + \
        ["--out", os.path.join(tmp, "plots")]
    charts.save = SAVE if n % RENDER_EVERY == 0 else unrendered
    rc, err = call(plot.main, argv)
    charts.save = SAVE
    plot_close_all()
    yield "plot.py " + " ".join(argv), rc, err


def same_files(a, b, but):
    """Whether folders a and b hold the same files, byte for byte, but one."""
    names = (set(os.listdir(a)) | set(os.listdir(b))) - {but}
    return all(os.path.isfile(os.path.join(b, n)) and os.path.isfile(os.path.join(a, n))
               and filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)
               for n in names)


def plot_close_all():
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def one(seed, n, tmp):
    """Mutation n of seed: (what was done, [failures])."""
    rng = random.Random(f"{seed}-{n}")
    fixture = rng.choice(FOLDERS)
    broken = copy_fixture(fixture, tmp, "broken")
    done, wanted = [], rng.randint(1, 3)
    for _ in range(20):  # a mutation finds nothing to change in a folder emptied by others
        what = rng.choice(MUTATIONS)(rng, broken)
        done += [what] if what else []
        if len(done) == wanted:
            break
    what = f"{fixture}: " + "; ".join(done)
    results = runs(os.path.join(FIXTURES, fixture), broken, tmp, n)
    bad = [f"{cmd}: exit {rc}\n{err}" for cmd, rc, err in results
           if rc not in (0, 1, 2) or "Traceback" in err]
    return what, bad


def main(argv):
    seed = argv[0]
    count = int(argv[1]) if len(argv) > 1 else 300
    which = [int(argv[2])] if len(argv) > 2 else range(count)
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
    start, failed = time.monotonic(), 0
    for n in which:
        with tempfile.TemporaryDirectory(prefix="dpscale-fuzz-") as tmp:
            what, bad = one(seed, n, tmp)
        if bad:
            failed += 1
            print(f"FAIL seed {seed}, mutation {n} ({what}); again: "
                  f"test_fuzz_results.py {seed} {count} {n}", file=sys.stderr)
            for b in bad:
                print("  " + b.replace("\n", "\n  "), file=sys.stderr)
    print(f"{len(which)} mutations of seed {seed}: {failed} with a traceback or another exit "
          f"status, {time.monotonic() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
