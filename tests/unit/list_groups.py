#!/usr/bin/env python3
"""The groups of a unit test file, one a line: the names in its
EXPECT_GROUPS(GROUP(a), GROUP(b), ...) table (tests/unit/expect.h), what the
executable's --list prints too, read at configure time, when it is not built
yet. Anything else in the table, or no table, fails.

usage: list_groups.py TEST_FILE.c
"""
import re
import sys


def groups(text):
    """The group names of the EXPECT_GROUPS table in a C file's text."""
    tables = re.findall(r"^EXPECT_GROUPS\((.*?)\);", text, re.S | re.M)
    if len(tables) != 1:
        raise ValueError(f"{len(tables)} EXPECT_GROUPS tables, expected one")
    names = re.findall(r"GROUP\((\w+)\)", tables[0])
    rest = re.sub(r"GROUP\(\w+\)|[\s,]", "", tables[0])
    if rest or not names:
        raise ValueError(f"EXPECT_GROUPS holds other than GROUP(name) entries: {rest or 'none'}")
    return names


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        try:
            print("\n".join(groups(f.read())))
        except ValueError as e:
            print(f"{argv[1]}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
