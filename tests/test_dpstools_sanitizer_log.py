#!/usr/bin/env python3
"""dpstools.sanitizer_log on compute-sanitizer logs with counts known by
reading them. fixtures: tests/fixtures/sanitizer's three logs of one
process (4 of NCCL's probing errors; those and one CUDA API error of the
program's own, its frames' libraries on the next line; those and one
invalid write) give the summary's total, NCCL's count, the program's API
and memory errors and its first record's line. processes: a log of two
processes, the program's output between their lines, sums the two
summaries (one says "1 error"), tells NCCL's API error (its library on a
frame's next line) from the program's, counts a leak and a memory error
whose backtrace passes through NCCL as the program's, skips the banner,
the leak summary, warnings and the end line, and counts the program's
errors past the print limit. records: a log's records, each its first
line and its details, the prefix and the program's own lines dropped.
edges: an empty log reports nothing, and a summary below NCCL's
printed count leaves the program none (not a negative count).
Usage: test_dpstools_sanitizer_log.py SANITIZER_FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test(f"dpstools sanitizer_log {c}", FIXTURES + "/sanitizer", c, suite=NOSAN, timeout=300)
         for c in ("fixtures", "processes", "records", "edges")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os

from dpstools import sanitizer_log
from helpers import expect, run_cases

P = "========="  # the tool's prefix, written out here rather than taken from the module
NCCL_PROBE = [f"{P} Program hit cudaErrorNoKernelImageForDevice (error 209) due to \"no kernel "
              "image is available for execution on the device\" on CUDA API call to "
              "cudaFuncGetAttributes.",
              f"{P}     Saved host backtrace up to driver entry point at error",
              f"{P}     Host Frame:ncclInitKernelsForDevice(int, int, unsigned long*) [0x7fcbb]",
              f"{P}                in /usr/lib/x86_64-linux-gnu/libnccl.so.2",
              P]
OWN_API = [f"{P} Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on "
           "CUDA API call to cudaMemcpyAsync.",
           f"{P}     Host Frame:be_cuda_copy [0x892bf]",
           f"{P}                in /work/dpscale/build-gpu/src/dpscale",
           P]
LEAK = [f"{P} Leaked 64 bytes at 0x7f3a1e000000",
        f"{P}     Saved host backtrace up to driver entry point at cudaMalloc time",
        f"{P}         Host Frame: cudaMalloc [0x1] in libcudart.so.13",
        P]
# a memory error whose backtrace passes through NCCL's library: the program's all the same
NCCL_WRITE = [f"{P} Invalid __global__ write of size 8 bytes",
              f"{P}     at ncclKernel+0x10",
              f"{P}         Host Frame: ncclLaunchKernel [0x2] in libnccl.so.2",
              P]


def counts(log):
    """(total, processes, nccl_api, own_api, memory, own, first_own) of a SanitizerLog."""
    return (log.total, log.processes, log.nccl_api, log.own_api, log.memory, log.own,
            log.first_own)


def expect_counts(text, want, what):
    got = counts(sanitizer_log.parse(text))
    expect(got == want, f"{what}: (total, processes, nccl_api, own_api, memory, own, "
                        f"first_own) {got}, expected {want}")


def case_fixtures(folder):
    own_api = ("Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA "
               "API call to cudaMemcpyAsync.")
    want = {"nccl-probes.log": (4, 1, 4, 0, 0, 0, None),
            "own-api.log": (5, 1, 4, 1, 0, 1, own_api),
            "own-write.log": (5, 1, 4, 0, 1, 1, "Invalid __global__ write of size 4 bytes")}
    for name, expected in want.items():
        with open(os.path.join(folder, name)) as f:
            expect_counts(f.read(), expected, name)


def case_processes(_):
    first = [f"{P} COMPUTE-SANITIZER", *NCCL_PROBE, "dpscale: rank 0 ready", *OWN_API,
             f"{P} Warning: Device not supported.", *NCCL_WRITE,
             f"{P} LEAK SUMMARY: 0 bytes leaked in 0 allocations",
             f"{P} ERROR SUMMARY: 5 errors"]
    second = [f"{P} COMPUTE-SANITIZER", "dpscale: rank 1 ready", *LEAK,
              f"{P} Target application returned an error", f"{P} ERROR SUMMARY: 1 error"]
    # 6 errors in all, NCCL's 1: the program's 5, though only 3 of them were printed
    want = (6, 2, 1, 1, 2, 5, OWN_API[0][len(P) + 1:])
    expect_counts("\n".join(first + second) + "\n", want, "two processes")


def case_records(_):
    text = "\n".join([f"{P} COMPUTE-SANITIZER", "the program's own line", *OWN_API[:2],
                      f"{P}   ", *LEAK[:1], f"{P}     at f+0x10", f"{P}"])
    want = [["COMPUTE-SANITIZER"],
            [OWN_API[0][len(P) + 1:], "Host Frame:be_cuda_copy [0x892bf]"],
            ["Leaked 64 bytes at 0x7f3a1e000000", "at f+0x10"]]
    got = sanitizer_log.records(text)
    expect(got == want, f"records {got}, expected {want}")


def case_edges(_):
    expect_counts("", (0, 0, 0, 0, 0, 0, None), "an empty log")
    expect_counts("dpscale: ok\n", (0, 0, 0, 0, 0, 0, None), "a log of the program's lines alone")
    truncated = "\n".join(NCCL_PROBE + NCCL_PROBE + [f"{P} ERROR SUMMARY: 1 error"])
    expect_counts(truncated, (1, 1, 2, 0, 0, 0, None), "a summary below NCCL's printed count")


if __name__ == "__main__":
    run_cases(globals())
