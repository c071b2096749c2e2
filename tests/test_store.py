#!/usr/bin/env python3
"""Rank 0's TCP store and a rank's end of it against peers that are no
dpscale ranks, on 127.0.0.1: a listener that never accepts, a rank 0 that
stalls mid-frame or announces a 1 GiB roster, a peer that stalls mid-frame
or floods keys, and a second process claiming a running job's rank. Each
case ends within --timeout and a second, in bounded memory (docs/DESIGN.md,
"The store's bounds"; a second beyond this binary's own start and end,
measured beside it: a sanitizer's build or a loaded machine start slower).
Usage: test_store.py DPSCALE CASE; exit 0 pass, 1 fail."""
from listing import DPSCALE, exit_if_listing, test

# each case ends within --timeout and a second, in bounded memory; alone, as they are timed
TESTS = [test("store " + c.replace("_", " "), DPSCALE, c, timeout=120, parallel=False)
         for c in ("no_accept", "stalled_rank0", "big_roster", "stalled_peer", "flood",
                   "duplicate_rank")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import contextlib
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from helpers import expect, read_folder, run_case

RUN = ["run", "--mode", "ddp", "--backend", "host", "--model", "tiny", "--warmup", "1"]
HELLO, SET, GET, VAL, GONE, BEAT, BYE, ABORT = range(1, 9)
GRACE_S = 1.0  # every case ends within --timeout and this (and its start and end)
ALONE_TIMEOUT_S = 0.5
MIB = 1 << 20


def frame(kind, key=b"", val=b""):
    """A store frame (src/comm/store_wire.h): type, pad, key and value lengths."""
    return struct.pack("!BBHI", kind, 0, len(key), len(val)) + key + val


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rank:
    """One dpscale rank with torchrun's variables, its output in a file."""

    def __init__(self, binary, tmp, name, rank, size, port, *extra):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1", DPSCALE_PORT=str(port))
        self.log = open(os.path.join(tmp, f"{name}.{rank}.{time.monotonic_ns()}.log"), "w+")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen([binary, *RUN, *extra, "--out", tmp, "--name", name], env=env,
                                  stdout=self.log, stderr=subprocess.STDOUT)

    def finish(self, limit_s):
        """(exit status, seconds since its start, peak RSS in MiB, output);
        killed past limit_s."""
        while True:
            pid, status, use = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - self.t0 > limit_s:
                self.p.kill()
                pid, status, use = os.wait4(self.p.pid, 0)
                break
            time.sleep(0.01)
        took = time.monotonic() - self.t0
        self.p.returncode = os.waitstatus_to_exitcode(status)
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        return self.p.returncode, took, use.ru_maxrss / 1024, text


def alone(binary, tmp, rank, size):
    """(seconds, MiB): how much longer than its --timeout a rank that meets
    no one (nothing listens, or no rank comes) takes to start and end, and
    its peak RSS: what a peer's case is measured beside."""
    rc, took, mib, text = Rank(binary, tmp, "alone", rank, size, free_port(), "--timeout",
                               str(ALONE_TIMEOUT_S)).finish(30)
    expect(rc == 1, f"the rank alone: exit {rc}: {text[-1500:]}")
    return max(took - ALONE_TIMEOUT_S, 0.0), mib


def wait_listening(rank0, port, limit_s=10):
    """Waits until rank0's store listens on port."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and rank0.p.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.02)
    rc, _, _, text = rank0.finish(1)
    expect(False, f"rank 0 does not listen on port {port} (exit {rc}): {text[-1500:]}")


@contextlib.contextmanager
def full_listener():
    """A port whose listener's accept queue is full: the kernel drops SYNs."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port, fill = lsock.getsockname()[1], []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", port))
        fill.append(c)
    time.sleep(0.5)
    try:
        yield port
    finally:
        for c in fill + [lsock]:
            c.close()


def read_frame(sock):
    """(type, key, value) of the next frame; None at the end."""
    def exactly(n):
        data = b""
        while len(data) < n:
            got = sock.recv(n - len(data))
            if not got:
                return None
            data += got
        return data
    head = exactly(8)
    if head is None:
        return None
    kind, _, klen, vlen = struct.unpack("!BBHI", head)
    body = exactly(klen + vlen)
    return None if body is None else (kind, body[:klen], body[klen:])


@contextlib.contextmanager
def fake_rank0(answer):
    """A rank 0 that takes every hello and answers a GET with answer(sock, key)."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)

    def first_get(c):
        """A GET sent at once after the request hello (dpscale before the
        store answered hellos did not wait for one); None if none came."""
        c.settimeout(0.3)
        try:
            return read_frame(c)
        except TimeoutError:
            return None
        finally:
            c.settimeout(None)

    def serve(c):
        with contextlib.suppress(OSError), c:
            early = None
            while (f := early or read_frame(c)) is not None:
                early = None
                if f[0] == HELLO and f[1] == b"req":
                    early = first_get(c)
                if f[0] == HELLO and early is None:
                    c.sendall(frame(VAL, f[1]))
                elif f[0] == GET:
                    answer(c, f[1])

    def accept():
        with contextlib.suppress(OSError):
            while True:
                threading.Thread(target=serve, args=(lsock.accept()[0],), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield lsock.getsockname()[1]
    finally:
        lsock.close()


def expect_within(took, timeout, own, what):
    """took, less the rank's own start and end (own), within --timeout and GRACE_S."""
    print(f"{what}: {took:.2f} s with --timeout {timeout:g} (its start and end: {own:.2f} s)")
    expect(took - own < timeout + GRACE_S,
           f"{what}: took {took:.1f} s with --timeout {timeout:g}, {own:.2f} s of them its start "
           f"and end (limit {timeout + GRACE_S:g} s and those)")


def case_no_accept(binary):
    """MASTER_ADDR's port has a listener whose accept queue is full, so the
    kernel drops the rank's SYNs: the rank gives up at --timeout 3, not
    after the kernel's two minutes of retries, and names the address."""
    with tempfile.TemporaryDirectory() as tmp, full_listener() as port:
        own = alone(binary, tmp, 1, 2)[0]
        rc, took, _, text = Rank(binary, tmp, "na", 1, 2, port, "--timeout", "3").finish(40)
        expect_within(took, 3, own, "rank 1, its rank 0 a listener that accepts nothing")
        expect(rc == 1 and f"no rank 0 listening at 127.0.0.1:{port} within --timeout 3 s" in text,
               f"exit {rc}: {text[-1500:]}")


def case_stalled_rank0(binary):
    """Rank 0 takes the hellos, then sends 20 bytes of the roster's frame
    and nothing more: rank 1 ends within --timeout 3 and a second, saying
    the roster did not come."""
    def stall(sock, key):
        sock.sendall(frame(VAL, key, b"x" * 100)[:20])

    with tempfile.TemporaryDirectory() as tmp, fake_rank0(stall) as port:
        own = alone(binary, tmp, 1, 2)[0]
        rc, took, _, text = Rank(binary, tmp, "st", 1, 2, port, "--timeout", "3").finish(40)
        expect_within(took, 3, own, "rank 1, its rank 0 stalled mid-frame")
        expect(rc == 1 and f"dpscale/roster did not come from rank 0's store at 127.0.0.1:{port} "
               "within --timeout 3 s" in text, f"exit {rc}: {text[-1500:]}")


def case_big_roster(binary):
    """Rank 0 answers the roster with a frame announcing 1 GiB: rank 1
    refuses it from its header (a roster of 2 ranks is at most 384 bytes),
    at once and without taking the memory."""
    def huge(sock, key):
        with contextlib.suppress(OSError):
            sock.sendall(struct.pack("!BBHI", VAL, 0, len(key), 1 << 30) + key)
            for _ in range(1024):
                sock.sendall(bytes(MIB))

    with tempfile.TemporaryDirectory() as tmp:
        own, base = alone(binary, tmp, 1, 2)
        with fake_rank0(huge) as port:
            rc, took, mib, text = Rank(binary, tmp, "big", 1, 2, port, "--timeout",
                                       "3").finish(60)
        print(f"a 1 GiB roster: rank 1's peak RSS {mib:.0f} MiB ({base:.0f} MiB alone)")
        expect_within(took, 3, own, "rank 1 sent a 1 GiB roster")
        expect(mib < base + 64, f"a rank sent a 1 GiB roster peaked at {mib:.0f} MiB "
               f"({base:.0f} MiB alone)")
        expect(rc == 1 and f"rank 0's store at 127.0.0.1:{port} sent 1073741824 bytes for "
               "dpscale/roster, and this rank takes 384 at most" in text,
               f"exit {rc}: {text[-1500:]}")


def slowloris(port, hold_s):
    """A peer that sends one byte of a frame's header, then nothing."""
    def run():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(bytes([SET]))
            time.sleep(hold_s)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def case_stalled_peer(binary):
    """A peer sends one byte of a frame and stalls: two ranks meet and
    train as if it were not there; and a rank 0 whose rank 1 never comes
    ends within --timeout 3 and a second, the missing rank named."""
    with tempfile.TemporaryDirectory() as tmp:
        own, port = alone(binary, tmp, 0, 2)[0], free_port()
        r0 = Rank(binary, tmp, "pair", 0, 2, port, "--timeout", "3", "--steps", "5")
        wait_listening(r0, port)
        slowloris(port, 20)
        time.sleep(0.2)
        r1 = Rank(binary, tmp, "pair", 1, 2, port, "--timeout", "3", "--steps", "5")
        for r, (rc, took, _, text) in enumerate([r0.finish(40), r1.finish(40)]):
            expect(rc == 0, f"rank {r} beside a stalled peer: exit {rc}: {text[-1500:]}")
            expect_within(took, 3, own, f"rank {r} of 2 beside a stalled peer")
        expect(read_folder(os.path.join(tmp, "pair"))[0][0]["status"] == "ok", "pair: not ok")

        port = free_port()
        r0 = Rank(binary, tmp, "lone", 0, 2, port, "--timeout", "3", "--steps", "5")
        wait_listening(r0, port)
        slowloris(port, 20)
        rc, took, _, text = r0.finish(40)
        expect_within(took, 3, own, "rank 0 without its rank 1, beside a stalled peer")
        expect(rc == 1 and "1 of 2 ranks arrived within --timeout 3 s; missing: 1" in text,
               f"exit {rc}: {text[-1500:]}")


def flood(port, rounds=3, keys=200000):
    """A peer that claims rank 1 (hellos well formed, both connections) and
    sets keys without end, then values of 256 MiB; and one that sends a
    1 GiB value before any hello."""
    hello = b"1 4242 evil lo"

    def claimant():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as ctl:
            ctl.sendall(frame(HELLO, b"ctl", hello))
            time.sleep(0.2)
            for _ in range(rounds):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                            10) as req:
                    req.sendall(frame(HELLO, b"req", hello))
                    req.sendall(b"".join(frame(SET, b"k%d" % i, b"v") for i in range(keys)))
                    req.sendall(struct.pack("!BBHI", SET, 0, 1, 256 * MIB) + b"K" + bytes(MIB))

    def early():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 10) as s:
            s.sendall(struct.pack("!BBHI", SET, 0, 1, 1 << 30) + b"K")
            for _ in range(64):
                s.sendall(bytes(MIB))

    threads = [threading.Thread(target=f, daemon=True) for f in (claimant, early)]
    for t in threads:
        t.start()
    return threads


def case_flood(binary):
    """Rank 0 of 3, a peer claiming rank 1 floods keys and 256 MiB values,
    another sends a 1 GiB value before its hello: rank 0 refuses each,
    naming the peer, what it sent and the limit, the group fails at once
    (within --timeout 5 and a second), and rank 0's peak memory stays within
    32 MiB of the same rank 0 alone (its store holds under 1 MiB here)."""
    with tempfile.TemporaryDirectory() as tmp:
        own, base = alone(binary, tmp, 0, 3)
        port = free_port()
        r0 = Rank(binary, tmp, "flood", 0, 3, port, "--timeout", "5", "--steps", "5")
        wait_listening(r0, port)
        threads = flood(port)
        rc, took, mib, text = r0.finish(60)
        for t in threads:
            t.join(15)
        print(f"flooded: rank 0's peak RSS {mib:.0f} MiB ({base:.0f} MiB alone)")
        expect_within(took, 5, own, "rank 0 flooded")
        expect(mib < base + 32, f"rank 0 flooded peaked at {mib:.0f} MiB ({base:.0f} MiB alone)")
        expect(rc == 1 and "refused 127.0.0.1:" in text and "(rank 1's request connection, pid "
               "4242 on host evil): it set key k16 beyond the 16 keys a rank needs at most" in text,
               f"exit {rc}: {text[-2500:]}")
        expect("(before its hello): it sent 1073741824 bytes for key \"K\"" in text,
               f"the 1 GiB value before a hello not refused, named:\n{text[-2500:]}")
        runs = read_folder(os.path.join(tmp, "flood"))[0]
        expect(runs[0]["status"] == "error" and "beyond the 16 keys" in runs[0]["error"],
               f"runs {runs}")


def case_duplicate_rank(binary):
    """While ranks 0 and 1 of a job run (no job id: one port, as MPICH or two
    srun steps leave it), a third process claims rank 1: rank 0's store
    refuses it, it says "two processes claim rank 1" naming both pids and
    exits 1 at once, and the job goes on and ends ok."""
    with tempfile.TemporaryDirectory() as tmp:
        port, job = free_port(), ("--steps", "30000", "--timeout", "30")
        r0 = Rank(binary, tmp, "dup", 0, 2, port, *job)
        wait_listening(r0, port)
        r1 = Rank(binary, tmp, "dup", 1, 2, port, *job)
        time.sleep(1.0)
        rc, took, _, text = Rank(binary, tmp, "dup", 1, 2, port, *job).finish(60)
        print(f"the newcomer claiming rank 1: exit {rc} after {took:.2f} s")
        expect(rc == 1 and took < 5 and f"two processes claim rank 1: pid {r1.p.pid} on host" in
               text, f"the newcomer: exit {rc} after {took:.1f} s: {text[-1500:]}")
        got = [r0.finish(120), r1.finish(120)]
        for r, (rc, _, _, text) in enumerate(got):
            expect(rc == 0, f"the job's rank {r} after the newcomer: exit {rc}: {text[-1500:]}")
        expect("two processes claim rank 1" in got[0][3], "rank 0's log does not name the claim")
        runs = read_folder(os.path.join(tmp, "dup"))[0]
        expect(len(runs) == 1 and runs[0]["status"] == "ok", f"runs {runs}")


CASES = {"no_accept": case_no_accept, "stalled_rank0": case_stalled_rank0,
         "big_roster": case_big_roster, "stalled_peer": case_stalled_peer, "flood": case_flood,
         "duplicate_rank": case_duplicate_rank}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[2], CASES[sys.argv[2]], os.path.abspath(sys.argv[1])))
