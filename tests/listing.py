"""A test file's meson tests, listed once, in the file: `FILE --list` prints
them, one a line, for tests/meson.build, which reads them at configure time.
Standard library only, and called before the file's other imports, so that
listing runs none of scripts/.

A line holds tab-separated fields: the test's name, its suites (comma-
separated), its timeout in seconds, true or false (whether it may run beside
other tests), its priority (meson starts higher ones first: a test of a
minute or more starts early, so that it does not run on alone at the end of
a parallel run), then the arguments after FILE, in which meson replaces DPSCALE
with the dpscale binary and NVTX_RECORD with tests/nvtx_record.c's library."""
import os
import sys

DPSCALE = "@dpscale@"
NVTX_RECORD = "@nvtx_record@"
# a test whose subject is Python or the pages, not dpscale's C: CI's sanitizer build skips it
NOSAN = "scripts,nosan"
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


# the priority of a test that takes a minute or more on 2 cores
LONG = 10


def test(name, *args, suite="integration", timeout=30, parallel=True, priority=0):
    """One meson test: `python3 FILE ARGS...`."""
    return (name, suite, timeout, parallel, priority, args)


def line(t):
    """A test's line of --list; fails on a field meson would misread."""
    name, suite, timeout, parallel, priority, args = t
    fields = [name, suite, str(timeout), "true" if parallel else "false", str(priority),
              *map(str, args)]
    bad = [f for f in fields if not f or "\t" in f or "\n" in f]
    if bad:
        raise ValueError(f"test {name!r}: empty or with a tab or newline: {bad}")
    return "\t".join(fields)


def exit_if_listing(tests):
    """With --list as the only argument: prints the tests and exits (1 when two share a name)."""
    if sys.argv[1:] != ["--list"]:
        return
    names = [t[0] for t in tests]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        sys.exit(f"{sys.argv[0]}: tests listed twice: {twice}")
    print("\n".join(line(t) for t in tests))
    sys.exit(0)
