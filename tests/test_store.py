#!/usr/bin/env python3
"""Rank 0's TCP store and a rank's end of it against peers that are no
dpscale ranks, on 127.0.0.1: a listener that never accepts, a rank 0 that
stalls mid-frame or announces a 1 GiB roster, a peer that stalls mid-frame
or floods keys, and a second process claiming a running job's rank. Each
case ends as docs/DESIGN.md's "The store's bounds" say, in bounded memory:
a wait the store bounds by --timeout ends with the message naming it; a
refusal ends the rank or the group with no --timeout in reach (a hang
guard, HANG_S, comes first). No case bounds a time. Usage: test_store.py
DPSCALE CASE; exit 0 pass, 1 fail."""
from listing import DPSCALE, exit_if_listing, test

HANG_S = 300  # a hang guard: far above any rank's run here on a busy machine under ASan
# no case is timed, so each may run beside other tests; meson's timeout guards a hang only
TESTS = [test("store " + c.replace("_", " "), DPSCALE, c, timeout=4 * HANG_S)
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

from helpers import Failure, expect, read_folder, run_case

RUN = ["run", "--mode", "ddp", "--backend", "host", "--model", "tiny", "--warmup", "1"]
HELLO, SET, GET, VAL, GONE, BEAT, BYE, ABORT = range(1, 9)
NEVER = str(2 * HANG_S)  # a --timeout no case may reach: the hang guard fires first
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

    def finish(self, what):
        """(exit status, peak RSS in MiB, output); fails as hung, the rank
        killed, past HANG_S."""
        while True:
            pid, status, use = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - self.t0 > HANG_S:
                self.p.kill()
                os.wait4(self.p.pid, 0)
                self.log.seek(0)
                raise Failure(f"{what}: hung, still running after {HANG_S} s: "
                              f"{self.log.read()[-1500:]}")
            time.sleep(0.01)
        self.p.returncode = os.waitstatus_to_exitcode(status)
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        return self.p.returncode, use.ru_maxrss / 1024, text


def alone(binary, tmp, rank, size):
    """The peak RSS (MiB) of a rank that meets no one (nothing listens, or
    no rank comes): what a peer's case is measured beside."""
    rc, mib, text = Rank(binary, tmp, "alone", rank, size, free_port(), "--timeout",
                         "0.5").finish("the rank alone")
    expect(rc == 1, f"the rank alone: exit {rc}: {text[-1500:]}")
    return mib


def wait_until(cond, what, end):
    """Polls cond() until it holds; fails as hung past `end` (time.monotonic())."""
    while not cond():
        expect(time.monotonic() < end, f"{what}: hung, not so after {HANG_S} s")
        time.sleep(0.02)


def listening(port):
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def wait_listening(rank0, port):
    """Waits until rank0's store listens on port; fails if rank 0 ends first."""
    def ready():
        if rank0.p.poll() is not None:
            rc, _, text = rank0.finish("rank 0")
            raise Failure(f"rank 0 ended before listening on port {port} (exit {rc}): "
                          f"{text[-1500:]}")
        return listening(port)
    wait_until(ready, f"rank 0 listening on port {port}", rank0.t0 + HANG_S)


def tcp_rows(path):
    """/proc/net/tcp's rows: (local port, remote port, state, tx queue, rx queue, inode)."""
    with open(path) as f:
        for line in f.read().splitlines()[1:]:
            c = line.split()
            tx, rx = (int(x, 16) for x in c[4].split(":"))
            local, remote = (int(a.rsplit(":", 1)[1], 16) for a in c[1:3])
            yield local, remote, c[3], tx, rx, c[9]


def queue_full(port):
    """Whether the listener on port has its accept queue full (the kernel then
    drops SYNs): a listening socket's rx queue is its backlog, its tx its limit."""
    return any(local == port and state == "0A" and rx > tx
               for local, _, state, tx, rx, _ in tcp_rows("/proc/net/tcp"))


def connections_to(pid, port):
    """How many established TCP connections process pid holds to port (IPv4)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return sum(1 for _, remote, state, _, _, inode in tcp_rows("/proc/net/tcp")
               if remote == port and state == "01" and inode in inodes)


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
    wait_until(lambda: queue_full(port), f"the listener on {port} with its accept queue full",
               time.monotonic() + HANG_S)
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


def case_no_accept(binary):
    """MASTER_ADDR's port has a listener whose accept queue is full, so the
    kernel drops the rank's SYNs: the rank gives up by its own deadline,
    its last try timed out (the SYNs unanswered, not refused), saying so
    with --timeout 3 and the address."""
    with tempfile.TemporaryDirectory() as tmp, full_listener() as port:
        rc, _, text = Rank(binary, tmp, "na", 1, 2, port, "--timeout", "3").finish(
            "rank 1, its rank 0 a listener that accepts nothing")
        expect(rc == 1 and f"no rank 0 listening at 127.0.0.1:{port} within --timeout 3 s "
               "(last try: Connection timed out)" in text, f"exit {rc}: {text[-1500:]}")


def case_stalled_rank0(binary):
    """Rank 0 takes the hellos, then sends 20 bytes of the roster's frame
    and nothing more: rank 1 ends by --timeout 3, not waiting on the rest,
    saying the roster did not come."""
    def stall(sock, key):
        sock.sendall(frame(VAL, key, b"x" * 100)[:20])

    with tempfile.TemporaryDirectory() as tmp, fake_rank0(stall) as port:
        rc, _, text = Rank(binary, tmp, "st", 1, 2, port, "--timeout", "3").finish(
            "rank 1, its rank 0 stalled mid-frame")
        expect(rc == 1 and f"dpscale/roster did not come from rank 0's store at 127.0.0.1:{port} "
               "within --timeout 3 s" in text, f"exit {rc}: {text[-1500:]}")


def case_big_roster(binary):
    """Rank 0 answers the roster with a frame announcing 1 GiB: rank 1
    refuses it from its header (a roster of 2 ranks is at most 384 bytes),
    without waiting on the rest (no --timeout in reach) or taking the
    memory."""
    def huge(sock, key):
        with contextlib.suppress(OSError):
            sock.sendall(struct.pack("!BBHI", VAL, 0, len(key), 1 << 30) + key)
            for _ in range(1024):
                sock.sendall(bytes(MIB))

    with tempfile.TemporaryDirectory() as tmp:
        base = alone(binary, tmp, 1, 2)
        with fake_rank0(huge) as port:
            rc, mib, text = Rank(binary, tmp, "big", 1, 2, port, "--timeout", NEVER).finish(
                "rank 1 sent a 1 GiB roster")
        print(f"a 1 GiB roster: rank 1's peak RSS {mib:.0f} MiB ({base:.0f} MiB alone)")
        expect(mib < base + 64, f"a rank sent a 1 GiB roster peaked at {mib:.0f} MiB "
               f"({base:.0f} MiB alone)")
        expect(rc == 1 and f"rank 0's store at 127.0.0.1:{port} sent 1073741824 bytes for "
               "dpscale/roster, and this rank takes 384 at most" in text,
               f"exit {rc}: {text[-1500:]}")


@contextlib.contextmanager
def slowloris(port):
    """A peer that sends one byte of a frame's header, then nothing until
    the block ends; it has sent it when the block begins."""
    sent, done = threading.Event(), threading.Event()

    def run():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(bytes([SET]))
            sent.set()
            done.wait(HANG_S)
        sent.set()  # or it could not connect: the wait below ends either way

    threading.Thread(target=run, daemon=True).start()
    expect(sent.wait(HANG_S), f"the stalled peer of port {port}: hung, not connected after "
           f"{HANG_S} s")
    try:
        yield
    finally:
        done.set()


def case_stalled_peer(binary):
    """A peer sends one byte of a frame and stalls: two ranks meet and
    train as if it were not there (no --timeout in reach); and a rank 0
    whose rank 1 never comes ends by --timeout 3, the missing rank named."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        r0 = Rank(binary, tmp, "pair", 0, 2, port, "--timeout", NEVER, "--steps", "5")
        wait_listening(r0, port)
        with slowloris(port):
            r1 = Rank(binary, tmp, "pair", 1, 2, port, "--timeout", NEVER, "--steps", "5")
            ends = [r.finish(f"rank {k} of 2 beside a stalled peer")
                    for k, r in enumerate((r0, r1))]
        for r, (rc, _, text) in enumerate(ends):
            expect(rc == 0, f"rank {r} beside a stalled peer: exit {rc}: {text[-1500:]}")
        expect(read_folder(os.path.join(tmp, "pair"))[0][0]["status"] == "ok", "pair: not ok")

        port = free_port()
        r0 = Rank(binary, tmp, "lone", 0, 2, port, "--timeout", "3", "--steps", "5")
        wait_listening(r0, port)
        with slowloris(port):
            rc, _, text = r0.finish("rank 0 without its rank 1, beside a stalled peer")
        expect(rc == 1 and "1 of 2 ranks arrived within --timeout 3 s; missing: 1" in text,
               f"exit {rc}: {text[-1500:]}")


def early_value(port):
    """A peer that sends a 1 GiB value's header before any hello, and 64 MiB
    of it; returns once rank 0's store refused it (its ABORT came, or the
    connection ended)."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                HANG_S) as s:
        s.settimeout(HANG_S)
        s.sendall(struct.pack("!BBHI", SET, 0, 1, 1 << 30) + b"K")
        with contextlib.suppress(OSError):
            for _ in range(64):
                s.sendall(bytes(MIB))
        while (f := read_frame(s)) is not None and f[0] != ABORT:
            pass


def claimant(port, rounds=3, keys=200000):
    """A peer that claims rank 1 (hellos well formed, both connections, the
    control one taken before the request one is opened) and sets keys
    without end, then values of 256 MiB; started in a thread."""
    hello = b"1 4242 evil lo"

    def run():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)) as ctl:
            ctl.settimeout(HANG_S)
            ctl.sendall(frame(HELLO, b"ctl", hello))
            taken = read_frame(ctl)
            if not taken or taken[0] != VAL:
                return  # refused: rank 0's output says why
            for _ in range(rounds):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                            HANG_S) as req:
                    req.sendall(frame(HELLO, b"req", hello))
                    req.sendall(b"".join(frame(SET, b"k%d" % i, b"v") for i in range(keys)))
                    req.sendall(struct.pack("!BBHI", SET, 0, 1, 256 * MIB) + b"K" + bytes(MIB))

    threading.Thread(target=run, daemon=True).start()


def case_flood(binary):
    """Rank 0 of 3: a peer sends a 1 GiB value before its hello, then
    another, claiming rank 1, floods keys and 256 MiB values: rank 0
    refuses each, naming the peer, what it sent and the limit, the group
    fails on the refusal (no --timeout in reach: the hang guard comes
    first), and rank 0's peak memory stays within 32 MiB of the same rank 0
    alone (its store holds under 1 MiB here)."""
    with tempfile.TemporaryDirectory() as tmp:
        base = alone(binary, tmp, 0, 3)
        port = free_port()
        r0 = Rank(binary, tmp, "flood", 0, 3, port, "--timeout", NEVER, "--steps", "5")
        wait_listening(r0, port)
        early_value(port)
        claimant(port)
        rc, mib, text = r0.finish("rank 0 flooded")
        print(f"flooded: rank 0's peak RSS {mib:.0f} MiB ({base:.0f} MiB alone)")
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
    """While ranks 0 and 1 of a job of 3 wait for rank 2 (no job id: one
    port, as MPICH or two srun steps leave it), a fourth process claims
    rank 1 once rank 1's hello was taken: rank 0's store refuses it, it
    says "two processes claim rank 1" naming both pids and exits 1 (no
    --timeout in reach: refused, not left waiting), ranks 0 and 1 still
    wait, and with rank 2 started the job ends ok."""
    with tempfile.TemporaryDirectory() as tmp:
        port, job = free_port(), ("--steps", "5", "--timeout", NEVER)
        r0 = Rank(binary, tmp, "dup", 0, 3, port, *job)
        wait_listening(r0, port)
        r1 = Rank(binary, tmp, "dup", 1, 3, port, *job)
        # its request connection is opened once its control hello was taken
        wait_until(lambda: connections_to(r1.p.pid, port) >= 2, "rank 1's hellos taken",
                   r1.t0 + HANG_S)
        rc, _, text = Rank(binary, tmp, "dup", 1, 3, port, *job).finish("the newcomer")
        expect(rc == 1 and f"two processes claim rank 1: pid {r1.p.pid} on host" in text,
               f"the newcomer claiming rank 1: exit {rc}: {text[-1500:]}")
        expect(r0.p.poll() is None and r1.p.poll() is None,
               f"the job ended with the newcomer: exit {r0.p.poll()}, {r1.p.poll()}")
        r2 = Rank(binary, tmp, "dup", 2, 3, port, *job)
        got = [r.finish(f"the job's rank {k}") for k, r in enumerate((r0, r1, r2))]
        for r, (rc, _, text) in enumerate(got):
            expect(rc == 0, f"the job's rank {r} after the newcomer: exit {rc}: {text[-1500:]}")
        expect("two processes claim rank 1" in got[0][2], "rank 0's log does not name the claim")
        runs = read_folder(os.path.join(tmp, "dup"))[0]
        expect(len(runs) == 1 and runs[0]["status"] == "ok", f"runs {runs}")


CASES = {"no_accept": case_no_accept, "stalled_rank0": case_stalled_rank0,
         "big_roster": case_big_roster, "stalled_peer": case_stalled_peer, "flood": case_flood,
         "duplicate_rank": case_duplicate_rank}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[2], CASES[sys.argv[2]], os.path.abspath(sys.argv[1])))
