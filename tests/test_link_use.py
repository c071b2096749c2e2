#!/usr/bin/python3
"""plot.py's link figures: summary.md's compact Link use table, link_use.csv
and links.png, on the results-host fixture (the default host suite's modes,
device counts and scalings) with a links.csv whose answers are known; and a
links.csv from a real `dpscale links` run drawn.
Usage: test_link_use.py table|chart|real [DPSCALE]; exit 0 pass, 1 fail."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

# plot.py's link figures: the compact Link use table and its flags on a known fixture,
# links.png; and a real `dpscale links` run's several sizes a path, drawn
TESTS = [test("link use table", "table", suite=NOSAN, timeout=300),
         test("link use chart", "chart", suite=NOSAN, timeout=300),
         test("link use real", "real", DPSCALE, timeout=600)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import os
import sys
import tempfile

from helpers import (copy_fixture, dpscale, expect, expect_exit, png_size, read_table, run_case,
                     script, write)

DEVS = ["dev0", "dev1", "dev2", "dev3"]
# h2d host->dev0: 200 GB/s at 4 KiB (in cache), 100 GB/s at 16 KiB, 10 GB/s from 1 MiB;
# every peer path 10 GB/s at every size.
LINKS = ["src,dst,method,bytes,bw_gbps,latency_us,status,backend,emulated",
         "host,dev0,h2d,4096,200,,ok,host,1", "host,dev0,h2d,16384,100,,ok,host,1",
         "host,dev0,h2d,1048576,10,,ok,host,1"] + \
    [f"{a},{b},d2d_write,{size},10,,ok,host,1" for a in DEVS for b in DEVS if a != b
     for size in (4096, 1048576)]
# dp on 1 device: every load moves 8 KiB (halfway, on a log scale, between 4 and 16 KiB:
# the link reads 150 GB/s) at these speeds: shares 200, 200, 50 and 20 %.
LOAD_GBPS = {"dp-tiny-fp32-sgd-g1-b8": 300, "dp-tiny-fp32-sgd-g1-b32-strong": 300,
             "dp-small-fp32-sgd-g1-b16": 75, "dp-small-fp32-sgd-g1-b64-strong": 30}
CACHE = "the copy stayed in cache"


def folder_with_links(tmp):
    """The results-host fixture with LINKS and dp's 1-device loads set to LOAD_GBPS."""
    folder = copy_fixture("results-host", tmp, "res")
    write(os.path.join(folder, "links.csv"), "\n".join(LINKS) + "\n")
    path = os.path.join(folder, "phases.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r["phase"] == "load" and r["config_id"] in LOAD_GBPS:
            r["bytes_per_step"], r["achieved_gbps"] = "8192", str(LOAD_GBPS[r["config_id"]])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return folder


def plot(folder, out):
    p = script("plot.py", folder, "--out", out)
    expect_exit(p, 0)
    return open(os.path.join(out, "summary.md")).read()


def table_rows(md):
    """The Link use table's data rows, as lists of cells."""
    part = md.split("## Link use", 1)[1].split("\n\n")
    table = next(b for b in part if b.startswith("| mode |")).splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]


def case_table():
    """One row per mode, device count and phase (16 for these suites), a share above
    100 % flagged with the host's reason, the full detail in link_use.csv."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        md = plot(folder_with_links(tmp), out)
        rows = table_rows(md)
        expect(len(rows) == 16, f"{len(rows)} rows, expected 16: {rows}")
        keys = {tuple(r[:3]) for r in rows}
        expect(len(keys) == len(rows), f"a mode, device count and phase twice: {rows}")
        load = next(r for r in rows if r[:3] == ["dp", "1", "load"])
        expect(load[3:] == ["4", "8 KiB", f"⚠ 125 %: {CACHE}", "20 %", "2 of 4"], f"{load}")
        expect("interpolated log-linearly" in md and "(link_use.csv)" in md and
               "(links.png)" in md, "the caption lacks the method or the links")
        for r in rows:  # no share above 100 % as a plain number
            for cell in r[5:7]:
                pct = float(cell.lstrip("⚠ ").split(" %")[0])
                expect(pct <= 100 or cell.startswith("⚠") and CACHE in cell, f"{r}")
        detail = read_csv_rows(os.path.join(out, "link_use.csv"))
        mine = next(d for d in detail if d["config_id"] == "dp-tiny-fp32-sgd-g1-b8")
        expect(abs(float(mine["link_gbps"]) - 150) < 1e-6 and
               abs(float(mine["share_pct"]) - 200) < 1e-6 and mine["flag"] == CACHE, f"{mine}")
        expect(len(detail) > 4 * len(rows), f"link_use.csv has {len(detail)} rows only")


def read_csv_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def valid_png(path):
    """The file is a whole PNG: signature, IHDR first, IEND last, a sane size."""
    w, h = png_size(path)
    with open(path, "rb") as f:
        data = f.read()
    expect(data[12:16] == b"IHDR" and data[-8:-4] == b"IEND", f"{path}: not a whole PNG")
    expect(400 <= w <= 6000 and 300 <= h <= 6000, f"{path} is {w}x{h}")


def case_chart():
    """links.png: bandwidth against size, a valid PNG beside the other charts, linked."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        md = plot(folder_with_links(tmp), out)
        valid_png(os.path.join(out, "links.png"))
        expect("![links](links.png)" in md, "summary.md does not show links.png")


def case_real(binary):
    """links.csv from `dpscale links` on the host backend (several sizes a path) drawn."""
    with tempfile.TemporaryDirectory() as tmp:
        dpscale(binary, "links", "--gpus", "4", "--link-max-bytes", "256K", "--steps", "3",
                out=tmp, name="l", check_rc=0)
        rows = read_table(os.path.join(tmp, "l", "links.csv"))
        sizes = {r["bytes"] for r in rows if r["method"] == "d2d_write"}
        expect(sizes == {"4096", "16384", "65536", "262144"}, f"sizes {sizes}")
        folder = copy_fixture("results-host", tmp, "res")
        os.replace(os.path.join(tmp, "l", "links.csv"), os.path.join(folder, "links.csv"))
        out = os.path.join(tmp, "out")
        md = plot(folder, out)
        valid_png(os.path.join(out, "links.png"))
        expect(len(table_rows(md)) == 16, "the Link use table of a real links.csv")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[1], CASES[sys.argv[1]], *sys.argv[2:]))
