#!/usr/bin/env python3
"""The options block of docs/reference.md: the options part of `dpscale --help`
(the lines after "options:" up to the first blank line), fenced as ```text
between the lines <!-- options:begin --> and <!-- options:end -->.

usage: readme_options.py DPSCALE PAGE            rewrite PAGE's block from --help
       readme_options.py DPSCALE PAGE --check    exit 1 with a diff where they differ

Exit status: 0 in sync (or rewritten), 1 differs (--check), 2 bad input.
Standard library only.
"""
import difflib
import subprocess
import sys

BEGIN, END = "<!-- options:begin -->", "<!-- options:end -->"
FENCE_OPEN, FENCE_CLOSE = "```text", "```"


class BadInput(Exception):
    pass


def help_options(dpscale):
    """The option lines of `DPSCALE --help`."""
    p = subprocess.run([dpscale, "--help"], capture_output=True, text=True, timeout=60)
    lines = p.stdout.splitlines()
    if p.returncode != 0 or "options:" not in lines:
        raise BadInput(f"{dpscale} --help: exit {p.returncode}, no 'options:' line")
    start = lines.index("options:") + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def split_page(path, text):
    """(lines before the block, the block's option lines, lines after it)."""
    lines = text.split("\n")
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        raise BadInput(f"{path}: expected one line {BEGIN} and, after it, one line {END}")
    b, e = lines.index(BEGIN), lines.index(END)
    inner = lines[b + 1:e]
    if len(inner) < 2 or inner[0] != FENCE_OPEN or inner[-1] != FENCE_CLOSE:
        raise BadInput(f"{path}: between the markers expected a {FENCE_OPEN} ... {FENCE_CLOSE} block")
    return lines[:b + 2], inner[1:-1], lines[e - 1:]


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--check"):
        raise BadInput("usage: readme_options.py DPSCALE PAGE [--check]")
    dpscale, page = argv[1], argv[2]
    with open(page, encoding="utf-8") as f:
        before, block, after = split_page(page, f.read())
    want = help_options(dpscale)
    if block == want:
        return 0
    if len(argv) == 4:
        sys.stdout.writelines(difflib.unified_diff(
            [l + "\n" for l in block], [l + "\n" for l in want],
            f"{page} (options block)", f"{dpscale} --help"))
        print(f"{page}: the options block differs from `dpscale --help`; "
              "rewrite it with `ninja -C build readme-options`")
        return 1
    with open(page, "w", encoding="utf-8") as f:
        f.write("\n".join(before + want + after))
    print(f"{page}: options block rewritten from `{dpscale} --help`")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (BadInput, OSError) as e:
        print(f"readme_options.py: {e}", file=sys.stderr)
        sys.exit(2)
