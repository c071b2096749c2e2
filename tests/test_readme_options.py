#!/usr/bin/env python3
"""The options block of docs/reference.md is `dpscale --help`'s options part,
and scripts/readme_options.py finds a difference and rewrites the block.
Usage: test_readme_options.py DPSCALE PAGE; exit 0 pass, 1 fail."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "readme_options.py")


def tool(dpscale, page, *extra):
    return subprocess.run([sys.executable, SCRIPT, dpscale, page, *extra], capture_output=True,
                          text=True, timeout=120)


def main(dpscale, page):
    failures = []
    p = tool(dpscale, page, "--check")
    if p.returncode != 0:
        failures.append(f"{os.path.basename(page)} differs from `dpscale --help` (exit {p.returncode}):\n"
                        f"{p.stdout}{p.stderr}")
    with open(page, encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        stale = os.path.join(tmp, os.path.basename(page))
        with open(stale, "w", encoding="utf-8") as f:
            f.write(text.replace("  --steps N ", "  --stepz N ", 1))
        p = tool(dpscale, stale, "--check")
        if p.returncode != 1 or "--stepz" not in p.stdout:
            failures.append(f"a changed option line passed --check: exit {p.returncode} {p.stdout}")
        p = tool(dpscale, stale)
        with open(stale, encoding="utf-8") as f:
            if p.returncode != 0 or f.read() != text:
                failures.append(f"rewriting did not restore the block: exit {p.returncode} {p.stderr}")
        with open(stale, "w", encoding="utf-8") as f:
            f.write(text.replace("<!-- options:end -->", ""))
        p = tool(dpscale, stale, "--check")
        if p.returncode != 2 or "options:end" not in p.stderr:
            failures.append(f"a page without the end marker: exit {p.returncode} {p.stderr}")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
