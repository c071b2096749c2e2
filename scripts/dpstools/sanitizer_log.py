"""compute-sanitizer's log read back: its errors told apart by whose they are.

The memcheck tool writes each error as a record: a line "========= WHAT"
(one space after the prefix), then its details and host backtrace indented
under the same prefix, a frame's library at its end ("Host Frame: f [0x..]
in libnccl.so.2") or, in older tools, on the next line ("in /path/lib.so");
each process ends with "========= ERROR SUMMARY: N errors". A CUDA API error
("Program hit cudaError... on CUDA API call to ...") whose backtrace passes
through NCCL's library is NCCL's own (it probes its kernels with
cudaFuncGetAttributes and takes the error as an answer); every other error,
memory errors and leaks included, is the program's. Standard library only.
"""
import re

PREFIX = "========="
SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
NCCL_LIB = re.compile(r"\blibnccl\b")


class SanitizerLog:
    """The errors of one log: total (the ERROR SUMMARY lines' sum),
    processes (how many summaries), nccl_api (CUDA API errors raised
    inside NCCL), own_api and memory (the records of the program's own
    CUDA API errors and of its other errors), first_own (the first of
    the program's records, its first line) and own (what counts: the
    summaries' total less NCCL's errors, so that errors past the tool's
    print limit count too)."""

    def __init__(self, total, processes, nccl_api, own_api, memory, first_own):
        self.total, self.processes = total, processes
        self.nccl_api, self.own_api, self.memory = nccl_api, own_api, memory
        self.first_own = first_own
        self.own = max(0, total - nccl_api)


def records(text):
    """The log's records, each the list of its lines without the prefix:
    the first the record's own line, the rest its indented details."""
    out = []
    for raw in text.splitlines():
        if not raw.startswith(PREFIX):
            continue  # the program's own output, interleaved
        body = raw[len(PREFIX):]
        if body.startswith(" ") and body[1:2].strip():  # "========= WHAT": a new record
            out.append([body.strip()])
        elif body.strip() and out:
            out[-1].append(body.strip())
    return out


# A record's first line that is no error: the tool's banner, its summaries, the end.
NOT_ERRORS = re.compile(r"^(COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|"
                        r"Target application returned|Error: process didn't terminate|"
                        r"No CUDA-MemCheck results|Warning)")


def parse(text):
    """The SanitizerLog of a log's text."""
    counts = [int(n) for n in SUMMARY.findall(text)]
    nccl = own_api = memory = 0
    first_own = None
    for rec in records(text):
        head = rec[0]
        if NOT_ERRORS.match(head):
            continue
        if head.startswith("Program hit"):
            if any(NCCL_LIB.search(line) for line in rec[1:]):
                nccl += 1
                continue
            own_api += 1
        else:
            memory += 1
        first_own = first_own or head
    return SanitizerLog(sum(counts), len(counts), nccl, own_api, memory, first_own)
