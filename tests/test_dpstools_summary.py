#!/usr/bin/env python3
"""scripts/dpstools/summary.py, imported, on folders the test writes with
known step times, peaks, memory and link figures (tests/tiny_folder.py)
and on results-host, mixed-host, accum-host and ci-host (their cells read
here with csv). glance: the At a glance rows (samples/s, the best mode,
ddp's speed-up with its interval, efficiencies, dp's GPU-0 memory ratio),
one device naming none, a tie within noise, the accum and -syncall columns
of accum-host, the failed count. failed: every configuration not ok with
its status, steps and error; cell_text's one line, escaped pipes and cut.
scaler: the configurations with a GradScaler, their skipped steps and first
and last loss scale. states: the ZeRO formulas per strategy, what a device
holds beyond them and why, device ranges. links: each copy's size, the
link's figure at it (log-linear between measured sizes, the nearest
outside), the share and its ⚠ above 100 %, the table's groups, link_use.csv.
torch: beside a PyTorch folder (ci-host with its times doubled and 0.1 ms
of Python overhead): each phase's two medians and their ratio, the module
run; nothing in common. write: the intro (emulated devices, the nodes ddp
ran on), summary.md's sections in order, an unwritable folder, a folder of
predictions alone.
Usage: test_dpstools_summary.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools summary " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("glance", "failed", "scaler", "states", "links", "torch", "write")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import math
import os
import tempfile
import types

from dpstools import summary
from dpstools.folder import Folder
from dpstools.results import InputError
from helpers import copy_fixture, edit, expect, rows_of, run_cases
from tiny_folder import MiB, run, write_folder

SLOW, FAST = [9.8, 9.9, 10.1, 10.2], [4.9, 4.95, 5.05, 5.1]  # medians 10 and 5 ms
LEAN = [5.0, 5.1, 5.2, 5.3]  # median 5.15 ms: within noise of FAST
HEAD = ["model", "precision", "scaling", "GPUs", "dp samples/s", "ddp samples/s", "best",
        "ddp speed-up over dp", "dp efficiency", "ddp efficiency", "dp GPU-0 memory ratio"]


def glance_folder(tmp):
    """Model m: dp 8 ms and ddp 4 ms at 1 device (batch 8), dp 10 ms and ddp
    5 ms at 2 (batch 16; dp's peaks 3 and 2 MiB), dp out of memory at 4;
    model k: dp 5.15 ms and ddp 5 ms at 2 devices."""
    runs = [run("dp-m-g1", 1, [7.9, 8.0, 8.0, 8.1], batch=8),
            run("ddp-m-g1", 1, [4.0] * 4, batch=8),
            run("dp-m-g2", 2, SLOW, peaks=[3 * MiB, 2 * MiB]),
            run("ddp-m-g2", 2, FAST),
            run("dp-m-g4", 4, [], status="oom", steps=4, error="device 0: out of memory"),
            run("dp-k-g2", 2, LEAN, model="k"), run("ddp-k-g2", 2, FAST, model="k")]
    return Folder(write_folder(os.path.join(tmp, "glance"), runs))


def table_rows(lines):
    """A markdown table's rows, its head and rule left out."""
    return [l for l in lines if l.startswith("| ") and not l.startswith(("| ---", "| model |",
                                                                        "| configuration |"))]


def case_glance(fixtures):
    """k at 2: within noise (ratio 5.15 / 5); m at 1: 1000 and 2000
    samples/s, one device; m at 2: ddp best, 2.00x [1.92, 2.08], the
    efficiencies 1600 / 2000 = 0.80 and 3200 / 4000 = 0.80, GPU-0 ratio 1.50."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = glance_folder(tmp)
        lines = summary.glance_table(folder)
    head = "| " + " | ".join(HEAD) + " |"
    one = f"- ({summary.ONE_DEVICE})"
    want = [f"| k | fp32 | weak | 2 | {16 / 5.15e-3:.1f} | 3200.0 | within noise: dp, ddp | "
            f"{5.15 / 5:.2f}x [{min(LEAN) / max(FAST):.2f}, {max(LEAN) / min(FAST):.2f}], within "
            f"noise | - | - | 1.00 |",
            f"| m | fp32 | weak | 1 | 1000.0 | 2000.0 | {one} | {one} | 1.00 | 1.00 | - |",
            "| m | fp32 | weak | 2 | 1600.0 | 3200.0 | ddp | 2.00x [1.92, 2.08] | 0.80 | 0.80 | "
            "1.50 |"]
    expect(lines[:4] == ["## At a glance", "", head, "|" + " --- |" * len(HEAD)],
           f"At a glance's head: {lines[:4]}")
    expect(table_rows(lines) == want,
           "rows:\n" + "\n".join(table_rows(lines)) + "\nexpected\n" + "\n".join(want))
    expect("Not in this table or the charts: 1 configuration that did not end ok (see Failed "
           "configurations)." in lines, "the failed run not counted")
    expect(summary.speedup_cell(folder, None, (2, 1.0, folder.runs[0])) == "-" and
           summary.memory_cell({}, None) == "-", "a mode that did not run")
    acc = Folder(os.path.join(fixtures, "accum-host"))
    lines = summary.glance_table(acc)
    cols = ["dp", "ddp", "ddp-syncall"]
    head = ["model", "precision", "accum", "scaling", "GPUs"] + \
        [f"{m} samples/s" for m in cols] + ["best", "ddp speed-up over dp",
                                            "ddp speed-up over ddp-syncall"] + \
        [f"{m} efficiency" for m in cols] + ["dp GPU-0 memory ratio"]
    expect(lines[2] == "| " + " | ".join(head) + " |", f"accum-host's head {lines[2]}")
    runs = {r["config_id"]: r for r in rows_of(os.path.join(fixtures, "accum-host", "runs.csv"))}
    sps = {c: float(runs[c]["samples_per_s"]) for c in runs}
    row = next(l for l in table_rows(lines) if l.startswith("| small | fp32 | 2 | weak | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    got = cells[5:8] + cells[11:14]
    want = [f"{sps[c]:.1f}" for c in ("dp-small-fp32-sgd-g2-b32-acc2",
                                      "ddp-small-fp32-sgd-g2-b32-acc2-bk25",
                                      "ddp-small-fp32-sgd-g2-b32-acc2-syncall-bk25")] + \
        [f"{sps[f'{m}-g2-b32{s}'] / (2 * sps[f'{m}-g1-b16{s}']):.2f}"
         for m, s in (("dp-small-fp32-sgd", "-acc2"), ("ddp-small-fp32-sgd", "-acc2-bk25"),
                      ("ddp-small-fp32-sgd", "-acc2-syncall-bk25"))]
    expect(got == want, f"accum 2 at 2 GPUs: samples/s and efficiencies {got}, expected {want}")
    expect(any(l.startswith("accum: micro-batches per optimizer step") for l in lines),
           "accum-host: no accum note")
    expect(summary.memory_lines(["dp", "dp-lean", "ddp", "ddp-syncall", "zero1"]) ==
           ["dp", "dp-lean", "zero1"], "memory_lines")


def case_failed(fixtures):
    """mixed-host's 8 configurations not ok, each row from runs.csv; one
    failed run; none; cell_text."""
    mixed = os.path.join(fixtures, "mixed-host")
    bad = [r for r in rows_of(os.path.join(mixed, "runs.csv")) if r["status"] != "ok"]
    lines = summary.failed_lines(Folder(mixed))
    want = ["## Failed configurations", "", "8 configurations did not end ok; no chart or table "
            "here draws them (runs.csv has the whole error).", "",
            "| configuration | status | steps done | error |", "| --- | --- | --- | --- |"] + \
        [f"| {r['config_id']} | {r['status']} | {r['steps_done']} of {r['steps']} | "
         f"{r['error']} |" for r in bad] + [""]
    expect(len(bad) == 8 and all(len(r["error"]) < 160 and "|" not in r["error"] for r in bad),
           "mixed-host's errors: not 8 short ones without a pipe")
    expect(lines == want, "failed_lines:\n" + "\n".join(lines) + "\nexpected\n" + "\n".join(want))
    with tempfile.TemporaryDirectory() as tmp:
        lines = summary.failed_lines(glance_folder(tmp))
    expect(lines[2].startswith("1 configuration did not end ok; no chart or table here draws it ")
           and lines[6] == "| dp-m-g4 | oom | 0 of 4 | device 0: out of memory |",
           f"one failed: {lines}")
    expect(summary.failed_lines(Folder(os.path.join(fixtures, "results-host"))) == [],
           "results-host: failed lines")
    long = "x" * 150 + " | y\n\tz " + "w" * 30
    for text, want in (("a |  b\n c", "a \\| b c"), ("", "-"), ("  \n ", "-"),
                       (long, ("x" * 150 + " | y z " + "w" * 30)[:159] .rstrip()
                        .replace("|", "\\|") + "…")):
        got = summary.cell_text(text)
        expect(got == want, f"cell_text({text!r}): {got!r}, expected {want!r}")
    expect(summary.cell_text("abcdef", most=4) == "abc…", "cell_text's most")


def case_scaler(fixtures):
    """accum-host's fp16 runs: dp skipped 1 step, ddp none; their loss
    scales (steps.csv's, rank 0) first and last; none skipped; no scaler."""
    acc = os.path.join(fixtures, "accum-host")
    runs = [r for r in rows_of(os.path.join(acc, "runs.csv")) if r["skipped_steps"]]
    scales = {}
    for s in rows_of(os.path.join(acc, "steps.csv")):
        if s["rank"] == "0" and s["loss_scale"]:
            scales.setdefault(s["config_id"], []).append(float(s["loss_scale"]))
    rows = [f"| {r['config_id']} | {r['precision']} | {r['skipped_steps']} | {r['steps_done']} | "
            f"{scales[r['config_id']][0]:g} | {scales[r['config_id']][-1]:g} |"
            for r in sorted(runs, key=lambda r: r["config_id"])]
    skipped = sum(int(r["skipped_steps"]) for r in runs)
    expect(len(runs) == 2 and skipped == 1, f"accum-host: {len(runs)} runs with a scaler")
    lines = summary.scaler_lines(Folder(acc))
    expect(lines[0] == f"## {summary.SKIPPED}" and table_rows(lines) == rows and
           lines[-2:] == ["1 timed step skipped over 2 configurations.", ""],
           "scaler_lines:\n" + "\n".join(lines) + "\nexpected rows\n" + "\n".join(rows))
    with tempfile.TemporaryDirectory() as tmp:
        clean = copy_fixture("accum-host", tmp, "clean")
        edit(os.path.join(clean, "runs.csv"), lambda rs: [
            dict(r, skipped_steps="0") if r["skipped_steps"] else r for r in rs])
        lines = summary.scaler_lines(Folder(clean))
    expect(lines[-2:] == ["No timed step was skipped.", ""], f"none skipped: {lines[-2:]}")
    expect(summary.scaler_lines(Folder(os.path.join(fixtures, "results-host"))) == [],
           "results-host has no scaler")
    for x, want in ((None, "-"), (65536.0, "65536"), (0.5, "0.5")):
        expect(summary.scale_text(x) == want, f"scale_text({x})")


def states_folder(tmp, kinds=True):
    """P = 1000 on each: ddp and fsdp (sgd) on 2 devices, zero1 (adamw) on
    4, dp; memory at the peak as written below (kinds: memory.csv's kind
    column filled)."""
    def m(cid, devices, category, kind, nbytes):
        return [{"config_id": cid, "device": d, "category": category,
                 "kind": kind if kinds else "", "bytes_at_peak": nbytes} for d in devices]
    memory = (m("ddp-m-g2", [0, 1], "parameters", "parameters", 4000) +
              m("ddp-m-g2", [0, 1], "gradients", "gradients", 4000) +
              m("ddp-m-g2", [0, 1], "momentum", "optimizer state", 4000) +
              m("ddp-m-g2", [0, 1], "gradient buckets", "communication", 4000) +
              m("fsdp-m-g2", [0, 1], "parameter shard", "parameters", 2000) +
              m("fsdp-m-g2", [0, 1], "gathered unit parameters", "parameters", 600) +
              m("fsdp-m-g2", [0, 1], "gradient shard", "gradients", 2000) +
              m("fsdp-m-g2", [0, 1], "unit gradients", "gradients", 400) +
              m("fsdp-m-g2", [0], "momentum shard", "optimizer state", 2002) +
              m("fsdp-m-g2", [1], "momentum shard", "optimizer state", 1998) +
              m("fsdp-m-g2", [0], "activations", "activations", 5000) +
              m("zero1-m-g4", range(4), "parameters", "parameters", 4000) +
              m("zero1-m-g4", range(4), "gradients", "gradients", 4000) +
              m("zero1-m-g4", range(4), "accumulated gradients", "gradients", 4000) +
              m("zero1-m-g4", range(4), "moments shard", "optimizer state", 2100) +
              m("dp-m-g2", [0, 1], "parameters", "parameters", 4000))
    runs = [run("ddp-m-g2", 2, FAST), run("fsdp-m-g2", 2, FAST), run("dp-m-g2", 2, SLOW),
            run("zero1-m-g4", 4, FAST, optimizer="adamw")]
    return Folder(write_folder(os.path.join(tmp, "states" + ("" if kinds else "-old")), runs,
                               memory=memory))


def case_states(fixtures):
    """state_formula: 4P, 4P, kP (SGD 4, AdamW 8), over N where sharded;
    the section's rows: ddp's buckets named communication, fsdp's units in
    flight and a shard's rounding (±2 bytes), zero1's accumulated gradients
    and 100 bytes not explained, devices 0–3 as one row; no kinds; none
    sharded."""
    def r(mode, n, opt="sgd", params="1000"):
        return {"mode": mode, "_n": n, "optimizer": opt, "params": params,
                "config_id": f"{mode}-x", "_path": "runs.csv", "_line": 2}
    for args, want in (
            (("zero2", 4, "adamw"), {"parameters": (4000, "4P"), "gradients": (1000, "4P/4"),
                                     "optimizer state": (2000, "8P/4")}),
            (("zero1", 2), {"parameters": (4000, "4P"), "gradients": (4000, "4P"),
                            "optimizer state": (2000, "4P/2")}),
            (("fsdp", 8, "adamw"), {"parameters": (500, "4P/8"), "gradients": (500, "4P/8"),
                                    "optimizer state": (1000, "8P/8")}),
            (("fsdp", 1), {"parameters": (4000, "4P"), "gradients": (4000, "4P"),
                           "optimizer state": (4000, "4P")}),
            (("ddp", 4, "adamw"), {"parameters": (4000, "4P"), "gradients": (4000, "4P"),
                                   "optimizer state": (8000, "8P")}),
            (("fsdp", 2, "lamb"), None), (("dp", 2), None), (("fsdp", 2, "sgd", ""), None)):
        got = summary.state_formula(r(*args))
        expect(got == want, f"state_formula{args}: {got}, expected {want}")
    f = "{:,} / {:,} ({})".format
    flight = ("parameters +600: gathered unit parameters 600 (two units gathered: the current "
              "and the prefetched); gradients +400: unit gradients 400 (two units' gradients "
              "before their reduce-scatter)")
    want = [f"| ddp-m-g2 | 1,000 | 0, 1 | {f(4000, 4000, '4P')} | {f(4000, 4000, '4P')} | "
            f"{f(4000, 4000, '4P')} | none (gradient buckets 4,000: communication, not model "
            f"state) |",
            f"| fsdp-m-g2 | 1,000 | 0 | {f(2600, 2000, '4P/2')} | {f(2400, 2000, '4P/2')} | "
            f"{f(2002, 2000, '4P/2')} | {flight}; optimizer state +2: +2 the shard's rounding "
            f"to whole elements |",
            f"| fsdp-m-g2 | 1,000 | 1 | {f(2600, 2000, '4P/2')} | {f(2400, 2000, '4P/2')} | "
            f"{f(1998, 2000, '4P/2')} | {flight}; optimizer state -2: -2 the shard's rounding "
            f"to whole elements |",
            f"| zero1-m-g4 | 1,000 | 0–3 | {f(4000, 4000, '4P')} | {f(8000, 4000, '4P')} | "
            f"{f(2100, 2000, '8P/4')} | gradients +4,000: accumulated gradients 4,000 (--accum: "
            f"the micro-steps' sum); optimizer state +100: +100 not explained |"]
    with tempfile.TemporaryDirectory() as tmp:
        lines = summary.model_state_lines(states_folder(tmp))
        expect(lines[0] == f"## {summary.STATES}" and table_rows(lines) == want,
               "model_state_lines:\n" + "\n".join(table_rows(lines)) + "\nexpected\n" +
               "\n".join(want))
        lines = summary.model_state_lines(states_folder(tmp, kinds=False))
        expect(lines == [f"## {summary.STATES}", "", "memory.csv has no model-state kinds of "
                         "these configurations: nothing to set against the formulas.", ""],
               f"no kinds: {lines}")
    expect(summary.model_state_lines(Folder(os.path.join(fixtures, "results-host"))) == [],
           "results-host: no sharded run, yet a section")
    for devs, want in (([0, 1, 2, 3], "0–3"), ([0, 2], "0, 2"), ([0, 1], "0, 1"), ([3], "3"),
                       ([0, 1, 3], "0, 1, 3"), ([2, 3, 4], "2–4")):
        expect(summary.device_ranges(devs) == want, f"device_ranges({devs})")


def link_at(points, size):
    """GB/s at size: log-linear between the measured (bytes, GB/s) around it,
    the nearest measured outside them."""
    points = sorted(points)
    if size <= points[0][0]:
        return points[0][1]
    if size >= points[-1][0]:
        return points[-1][1]
    (s0, b0), (s1, b1) = next((p, q) for p, q in zip(points, points[1:]) if size <= q[0])
    return b0 + (b1 - b0) * math.log(size / s0) / math.log(s1 / s0)


H2D = [(1024, 1.0), (MiB, 10.0)]
D2D = [(4 * MiB, 8.0), (16 * MiB, 12.0)]
BACK = [(1024, 1.0), (MiB, 10.0)]  # dev1 -> dev0: dp's reduce and ddp's ring all-reduce


def links_folder(tmp):
    """dp on 2 devices at batch 16 and 32 (load 32 and 64 KiB a step at 2.75
    and 5 GB/s; replicate 20 MiB, two 10 MiB groups, at 24 GB/s; reduce 4
    MiB at 5 GB/s; a scatter without a figure), ddp's all-reduce of 1000
    parameters in the default 25 MiB bucket (2000 B ring chunks at 0.5 GB/s)."""
    def ph(nbytes, gbps):
        return {"median_ms": 1.0, "bytes_per_step": nbytes, "achieved_gbps": gbps}
    dp = {0: {"load": ph(32768, 2.75), "replicate": ph(20 * MiB, 30.0)},
          1: {"replicate": ph(20 * MiB, 24.0), "scatter": ph(4096, ""),
              "reduce": ph(4 * MiB, 5.0), "load": ph(32768, 9.0)}}
    runs = [run("dp-m-g2", 2, SLOW, phases=dp),
            run("dp-m-g2-b32", 2, SLOW, batch=32, phases={0: {"load": ph(65536, 5.0)}}),
            run("ddp-m-g2", 2, FAST, phases={0: {"allreduce": ph(8000, 9.0)},
                                              1: {"allreduce": ph(8000, 0.5)}})]
    links = [{"src": s, "dst": d, "method": m, "bytes": b, "bw_gbps": g, "status": "ok"}
             for m, s, d, pts in (("h2d", "host", "dev0", H2D), ("d2d_write", "dev0", "dev1", D2D),
                                  ("d2d_write", "dev1", "dev0", BACK))
             for b, g in pts]
    links.append({"src": "host", "dst": "dev0", "method": "h2d", "bytes": 4 * MiB,
                  "bw_gbps": "", "status": "error"})  # not measured: left out
    return Folder(write_folder(os.path.join(tmp, "links"), runs, links=links))


def case_links(fixtures):
    """link_use's rows, link_use_table's groups, link_use.csv, copy_bytes,
    share_text; a folder without links.csv."""
    uses = [("dp-m-g2", "dp", 0, "load", 32768, 2.75, "h2d:host:dev0", H2D),
            ("dp-m-g2", "dp", 1, "replicate", 10 * MiB, 24.0, "d2d_write:dev0:dev1", D2D),
            ("dp-m-g2", "dp", 1, "reduce", 4 * MiB, 5.0, "d2d_write:dev1:dev0", BACK),
            ("dp-m-g2-b32", "dp", 0, "load", 65536, 5.0, "h2d:host:dev0", H2D),
            ("ddp-m-g2", "ddp", 1, "allreduce", 2000, 0.5, "d2d_write:dev1:dev0", BACK)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = links_folder(tmp)
        got = summary.link_use(folder)
        want = [{"config_id": c, "mode": m, "ngpus": 2, "device": d, "phase": p, "copy_bytes": b,
                 "achieved_gbps": a, "link": k, "link_gbps": link_at(pts, b),
                 "share_pct": 100 * a / link_at(pts, b)} for c, m, d, p, b, a, k, pts in uses]
        expect(len(got) == len(want) and all(
            g.keys() == w.keys() and all(abs(g[k] - w[k]) < 1e-9 if isinstance(w[k], float)
                                         else g[k] == w[k] for k in w) for g, w in zip(got, want)),
            "link_use:\n" + "\n".join(map(str, got)) + "\nexpected\n" + "\n".join(map(str, want)))
        path = summary.write_link_use(got, tmp, True)
        csv_rows = rows_of(path)
        expect(list(csv_rows[0]) == summary.LINK_USE_COLS + ["flag"] and
               [r["flag"] for r in csv_rows] == ["", "the copy stayed in cache", "", "", ""] and
               csv_rows[1]["link_gbps"] == f"{link_at(D2D, 10 * MiB):.3f}" and
               csv_rows[4]["copy_bytes"] == "2000", f"link_use.csv: {csv_rows}")
    share = {w["phase"] + w["config_id"]: w["share_pct"] for w in want}
    over = f"⚠ {share['replicatedp-m-g2']:.0f} %: the copy stayed in cache"
    loads = sorted([share["loaddp-m-g2"], share["loaddp-m-g2-b32"]])
    table = summary.link_use_table(got, True)
    want_table = [
        f"| ddp | 2 | allreduce | 1 | 1.95 KiB | {share['allreduceddp-m-g2']:.0f} % | "
        f"{share['allreduceddp-m-g2']:.0f} % | 0 of 1 |",
        f"| dp | 2 | load | 2 | 32 KiB–64 KiB | {sum(loads) / 2:.0f} % | {loads[0]:.0f} % | "
        f"0 of 2 |",
        f"| dp | 2 | replicate | 1 | 10 MiB | {over} | {over} | 1 of 1 |",
        f"| dp | 2 | reduce | 1 | 4 MiB | {share['reducedp-m-g2']:.0f} % | "
        f"{share['reducedp-m-g2']:.0f} % | 0 of 1 |"]
    expect(table[2:] == want_table and share["reducedp-m-g2"] == 50.0,
           "link_use_table:\n" + "\n".join(table[2:]) + "\nexpected\n" + "\n".join(want_table))
    expect(summary.link_use(Folder(os.path.join(fixtures, "results-host"))) == [],
           "results-host has no links.csv, yet link use")
    one = {"_n": 4, "_accum": 2, "params": "1000000", "bucket_mb": "0.5"}
    for phase, per_step, r, want in (
            ("load", 32768, one, 16384), ("scatter", 32768, dict(one, _accum=1), 32768),
            ("replicate", 25 * MiB, dict(one, _accum=1), 25 * MiB / 3),
            ("reduce", 40 * MiB, one, 10 * MiB), ("allreduce", 1, one, MiB / 2 / 4),
            ("allreduce", 1, dict(one, bucket_mb=""), 4e6 / 4)):
        got = summary.copy_bytes(phase, per_step, r)
        expect(abs(got - want) < 1e-6, f"copy_bytes({phase}, {per_step}, {r}): {got}, "
               f"expected {want}")
    for pct, emulated, want in ((5, True, "5 %"), (0.123, True, "0.12 %"), (10, True, "10 %"),
                                (99.6, True, "100 %"), (100, False, "100 %"),
                                (100.4, True, "⚠ 100 %: the copy stayed in cache"),
                                (250, False, "⚠ 250 %: NCCL's SM-driven copies outran the copy "
                                             "engine the link was measured with")):
        got = summary.share_text(pct, emulated)
        expect(got == want, f"share_text({pct}, {emulated}): {got!r}, expected {want!r}")


def torch_copy(tmp, name="torch", rename=False, module=None):
    """ci-host as a PyTorch folder: every step median and device 0's phase
    medians twice ci-host's, 0.1 ms of Python overhead on device 0 (renamed:
    every config_id with a 'pt-' in front)."""
    folder = copy_fixture("ci-host", tmp, name)
    cid = (lambda c: "pt-" + c) if rename else (lambda c: c)

    def twice(col, extra=None):
        def fn(rows):
            return [dict(r, config_id=cid(r["config_id"]), **(
                {col: f"{2 * float(r[col]):.4f}"} if extra is None or r["device"] == "0" else {}),
                **({} if extra is None else {"python_overhead_ms": extra(r)})) for r in rows]
        return fn
    edit(os.path.join(folder, "runs.csv"), twice("step_ms_median"))
    edit(os.path.join(folder, "phases.csv"), twice("median_ms",
                                                   lambda r: "0.1" if r["device"] == "0" else ""))
    for f in ("steps.csv", "devices.csv"):
        edit(os.path.join(folder, f), lambda rows: [dict(r, config_id=cid(r["config_id"]))
                                                    for r in rows])
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    meta.update(note="PyTorch's own", backend="torch", **({"module": module} if module else {}))
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)
    return Folder(folder)


def case_torch(fixtures):
    """beside_torch: per configuration (sorted) the step and each phase of
    device 0 in PHASE_ORDER with its two medians, 2.00 and 0.1000 ms of
    overhead; module_lines; nothing in common."""
    ci = os.path.join(fixtures, "ci-host")
    med = {r["config_id"]: float(r["step_ms_median"]) for r in rows_of(os.path.join(ci,
                                                                                     "runs.csv"))}
    ph = {}
    for r in rows_of(os.path.join(ci, "phases.csv")):
        if r["device"] == "0":
            ph.setdefault(r["config_id"], {})[r["phase"]] = float(r["median_ms"])
    order = summary.PHASE_ORDER + ["allreduce"]
    want = []
    for cid in sorted(med):
        want.append(f"| {cid} | step | {med[cid]:.4f} | {2 * med[cid]:.4f} | 2.00 | - |")
        want += [f"| {cid} | {p} | {ph[cid][p]:.4f} | {2 * ph[cid][p]:.4f} | "
                 f"{'2.00' if ph[cid][p] else '-'} | 0.1000 |" for p in order if p in ph[cid]]
    mine = Folder(ci)
    module = {"spec": "torchvision.models.resnet18", "model_file": "r18.model"}
    with tempfile.TemporaryDirectory() as tmp:
        theirs = torch_copy(tmp, module=module)
        lines = summary.beside_torch(mine, theirs)
        rows = table_rows(lines)
        expect(lines[:3] == ["## Beside PyTorch", "", f"`{theirs.path}`: {theirs.label()}; "
                                                      f"PyTorch's own."] and rows == want,
               "beside_torch:\n" + "\n".join(rows) + "\nexpected\n" + "\n".join(want))
        said = [l for l in lines if l.startswith("- ")]
        want_mod = [f"- {cid}: PyTorch itself: {2 * med[cid]:.4f} ms; dpscale's model of it: "
                    f"{med[cid]:.4f} ms (PyTorch / dpscale 2.00)." for cid in sorted(med)]
        expect(said == want_mod and any(l.startswith(
            "The PyTorch folder ran the nn.Module torchvision.models.resnet18 itself") and
            "(the model file r18.model)" in l for l in lines), f"module_lines: {said}")
        other = torch_copy(tmp, "other", rename=True)
        lines = summary.beside_torch(mine, other)
        expect(lines[-2:] == ["No configuration in common (config_id): nothing to set side by "
                              "side.", ""], f"nothing in common: {lines}")
        expect(summary.module_lines(other, [("c", {}, {})]) == [], "no module: module lines")


def case_write(fixtures):
    """summary_intro of results-host and of a folder whose ddp spanned two
    nodes; write's summary.md (sections in order: the failed runs first,
    Link use last, the charts linked after it, link_use.csv beside it); a
    folder it cannot write in; write_predicted."""
    intro = summary.summary_intro(Folder(os.path.join(fixtures, "results-host")))
    expect(intro[:6] == ["# dpscale results: results-host", "",
                         "host backend, emulated devices on AMD EPYC.", "",
                         "Host backend: devices are emulated on the CPU, so these timings "
                         "describe the CPU, not a GPU.", ""] and
           intro[6].startswith("dp has no Python overhead") and len(intro) == 8,
           f"results-host's intro: {intro}")
    launch = {"launcher": "mpirun", "collectives": "gloo",
              "nodes": [{"host": "a", "ranks": [0, 1]}, {"host": "b", "ranks": [2, 3]}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = write_folder(os.path.join(tmp, "nodes"), [run("ddp-m-g4", 4, FAST)], meta={
            "backend": "cuda", "emulated": False, "devices": [{"name": "G1"}], "launch": launch})
        intro = summary.summary_intro(Folder(path))
        expect(intro[:5] == ["# dpscale results: nodes", "", "G1, cuda backend.", "",
                             "ddp's ranks ran on 2 nodes under mpirun: a (ranks 0, 1), b (ranks "
                             "2, 3); gradients moved with Gloo over TCP."],
               f"two nodes: {intro[:5]}")
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        with open(summary.write(glance_folder(tmp), out, [])) as f:
            heads = [l for l in f.read().splitlines() if l.startswith("## ")]
        expect(heads[:3] == ["## Failed configurations", "## At a glance", "## Diagnosis"],
               f"summary.md's sections of a folder with a failed run: {heads}")
        folder = links_folder(tmp)
        got = summary.write(folder, out, ["scaling.png", "phases.png"])
        with open(got) as f:
            md = f.read()
        heads = [l for l in md.splitlines() if l.startswith("## ")]
        expect(got == os.path.join(out, "summary.md") and md.startswith("# dpscale results: links")
               and heads[:2] == ["## At a glance", "## Diagnosis"] and heads[-1] == "## Link use"
               and md.endswith("![scaling](scaling.png)\n![phases](phases.png)\n") and
               os.path.exists(os.path.join(out, "link_use.csv")), f"summary.md:\n{md}")
        try:
            summary.write(folder, os.path.join(tmp, "no", "such"), [])
            expect(False, "an out folder that is not there: written")
        except InputError as e:
            expect("cannot write" in str(e), f"unwritable: {e}")
        pred = types.SimpleNamespace(path=os.path.join(tmp, "pred"),
                                     label=lambda: "predicted for m1")
        got = summary.write_predicted(pred, out, ["scaling.png"], [], ["/p/predictions.csv"])
        with open(got) as f:
            lines = f.read().splitlines()
        expect(lines[:3] == ["# dpscale predictions: pred", "", "predicted for m1."] and
               lines[4].startswith("Predictions: `/p/predictions.csv`. Weak scaling:") and
               lines[6:8] == ["## Predicted", ""] and lines[8].startswith("| model |") and
               lines[-1] == "![scaling](scaling.png)", f"write_predicted: {lines}")


if __name__ == "__main__":
    run_cases(globals())
