"""Emulated hosts on one Linux box (network namespaces, a bridge, tbf) for distributed tests."""
# Usage (as root):
#     ok, why = netns.available()
#     if not ok: print(why); sys.exit(77)
#     with netns.EmulatedHosts(n=2, rate="1gbit") as hosts:
#         p = hosts.popen(0, [...]); hosts.run(1, [...], timeout=60)
# Layout: namespaces dps<pid>-<tag>h<i> (one per host) and dps<pid>-<tag>sw
# (a bridge br0; tag "" unless given); host i's eth0 is a veth whose peer v<i> sits on the bridge,
# with address 10.<a>.<b>.<i+1>/24. The veths only ever exist inside the
# namespaces, so deleting the namespaces removes them. Processes run in their
# host's network namespace and in a UTS namespace of their own named
# hostname(i). Run this file to check it on this machine.
import atexit
import os
import re
import shutil
import signal
import subprocess
import time

TOOL_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
NAME_RE = re.compile(r"^dps(\d+)-")
# tc's rate units (bits/s); *bps are bytes/s.
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
              "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
              "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
              "kibps": 8 * 2**10, "mibps": 8 * 2**20, "gibps": 8 * 2**30, "tibps": 8 * 2**40}
MIN_BURST = 64 * 1024  # at least one GSO packet of a veth


class NetnsError(Exception):
    """A command that sets up or tears down the emulated hosts failed."""


def tool(name):
    """The absolute path of a command (sbin included), or None."""
    return shutil.which(name, path=TOOL_PATH)


def sh(*argv, check=True):
    """Runs a command; raises NetnsError with the command and its stderr
    when it fails and check is set. Returns its stdout."""
    p = subprocess.run([tool(argv[0]) or argv[0], *argv[1:]], capture_output=True, text=True,
                       timeout=60)
    if check and p.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def rate_bits(rate):
    """bits/s of a tc rate such as "1gbit", "100mbit", "12.5MBps"."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(rate))
    unit = m and (m.group(2).lower() or "bit")
    if not m or unit not in RATE_UNITS:
        raise ValueError(f"not a tc rate: {rate!r}")
    return float(m.group(1)) * RATE_UNITS[unit]


def burst_bytes(rate):
    """tbf's bucket for a rate: 4 ms of it, at least one 64 KiB GSO packet."""
    return max(int(rate_bits(rate) / 8 / 250), MIN_BURST)


def netns_names():
    """The names `ip netns list` shows."""
    return [line.split()[0] for line in sh("ip", "netns", "list").splitlines() if line.strip()]


def netns_pids(ns):
    return [int(x) for x in sh("ip", "netns", "pids", ns, check=False).split()]


def kill_netns(ns, timeout=5.0):
    """SIGKILLs everything inside namespace ns until none is left."""
    deadline = time.monotonic() + timeout
    while (pids := netns_pids(ns)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def delete_netns(ns, check=False):
    kill_netns(ns)
    sh("ip", "netns", "del", ns, check=check)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def cleanup_stale():
    """Deletes the namespaces dps<pid>-* whose process is gone (left behind
    by a killed test run); returns their names."""
    stale = [ns for ns in netns_names()
             if (m := NAME_RE.match(ns)) and not pid_alive(int(m.group(1)))]
    for ns in stale:
        delete_netns(ns)
    return stale


def available():
    """(True, "") when namespaces, veths, a bridge, tbf and UTS namespaces
    can be made here, otherwise (False, why)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    missing = [t for t in ("ip", "unshare", "tc") if not tool(t)]
    if missing:
        return False, f"missing command(s): {', '.join(missing)}"
    probe = f"dps{os.getpid()}-probe"
    try:
        sh("ip", "netns", "add", probe)
        sh("ip", "-n", probe, "link", "add", "name", "br0", "type", "bridge")
        sh("ip", "-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb")
        sh("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "va", "root", "tbf",
           "rate", "1gbit", "burst", "64kb", "latency", "100ms")
        sh("ip", "netns", "exec", probe, "unshare", "--uts", "--", "hostname", "dps-probe")
    except (NetnsError, OSError, subprocess.SubprocessError) as e:
        return False, f"cannot emulate hosts here: {e}"
    finally:
        sh("ip", "netns", "del", probe, check=False)
    return True, ""


def subnet(pid):
    """The first three octets of the hosts' /24, from the pid (the
    namespaces are isolated anyway; this only keeps addresses distinct)."""
    return f"10.{200 + pid % 50}.{pid // 50 % 250}"


class EmulatedHosts:
    """n hosts on a switch, as network namespaces; a context manager that
    removes them and kills their processes on exit, at exit and on
    SIGTERM/SIGINT."""

    def __init__(self, n=2, rate="1gbit", tag=""):
        if not re.fullmatch(r"[a-z0-9]{0,8}", tag):
            raise ValueError(f"tag {tag!r}: up to 8 of a-z0-9")
        self.n, self.rate, self.pid = n, rate, os.getpid()
        prefix = f"dps{self.pid}-{tag}"
        self.hosts = [f"{prefix}h{i}" for i in range(n)]
        self.switch = f"{prefix}sw"
        self.made, self.procs, self.old_handlers = [], [], {}
        self.closed = True

    def hostname(self, i):
        return f"dps-node{i}"

    def addr(self, i):
        return f"{subnet(self.pid)}.{i + 1}"

    # --- setting up

    def __enter__(self):
        self.closed = False
        atexit.register(self.close)
        self._catch_signals()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _add_netns(self, ns):
        if self.closed:  # a signal's clean-up came first
            raise NetnsError("EmulatedHosts closed while it was being set up")
        if ns in netns_names():
            raise NetnsError(f"namespace {ns} exists already (another EmulatedHosts? use tag=)")
        sh("ip", "netns", "add", ns)
        self.made.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")

    def _build(self):
        self._add_netns(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "name", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i in range(self.n):
            self._add_host(i)
        if self.rate is not None:
            self.shape(self.rate, verb="add")

    def _add_host(self, i):
        ns, port = self.hosts[i], f"v{i}"
        self._add_netns(ns)
        sh("ip", "-n", self.switch, "link", "add", "name", port, "type", "veth",
           "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def shape(self, rate, verb="replace"):
        """Every host's eth0 egress through tbf at rate (tc syntax); None
        removes the shaping."""
        for ns in self.hosts:
            if rate is None:
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root",
                   check=False)
                continue
            sh("ip", "netns", "exec", ns, "tc", "qdisc", verb, "dev", "eth0", "root", "tbf",
               "rate", str(rate), "burst", str(burst_bytes(rate)), "latency", "100ms")
        self.rate = rate

    # --- processes

    def command(self, i, argv):
        """argv wrapped to run in host i's network namespace and a UTS
        namespace named hostname(i)."""
        return [tool("ip"), "netns", "exec", self.hosts[i], tool("unshare"), "--uts", "--",
                "/bin/sh", "-c", 'hostname "$0" && exec "$@"', self.hostname(i), *argv]

    def popen(self, i, argv, env=None, **kw):
        """subprocess.Popen of argv on host i; killed at clean-up."""
        if self.closed:
            raise NetnsError("EmulatedHosts used outside its `with`")
        p = subprocess.Popen(self.command(i, argv), env=env, **kw)
        self.procs.append(p)
        return p

    def run(self, i, argv, timeout=60, input=None, check=False, **kw):
        """argv on host i to its end (killed after timeout seconds, then
        subprocess.TimeoutExpired); a CompletedProcess, output captured as
        text unless told otherwise. check: NetnsError when it fails."""
        kw.setdefault("text", True)
        if kw.pop("capture_output", True) and "stdout" not in kw and "stderr" not in kw:
            kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if input is not None:
            kw["stdin"] = subprocess.PIPE
        p = self.popen(i, argv, **kw)
        try:
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise
        if check and p.returncode != 0:
            raise NetnsError(f"`{' '.join(argv)}` on host {i} exited {p.returncode}: {err}")
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    # --- tearing down

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Kills every process started and anything else inside the
        namespaces, deletes the namespaces; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self._kill_procs()
            self._delete_all()
        finally:
            self._restore_signals()
            atexit.unregister(self.close)

    def _delete_all(self):
        """Deletes every namespace made, then raises the first failure."""
        errors = []
        for ns in reversed(self.made):
            try:
                delete_netns(ns, check=True)
            except NetnsError as e:
                errors.append(e)
        self.made = []
        if errors:
            raise errors[0]

    def _kill_procs(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def _catch_signals(self):
        """Ignored signals stay ignored, handlers not set from Python alone."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                if signal.getsignal(sig) not in (signal.SIG_IGN, None):
                    self.old_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: atexit and __exit__ only
                pass

    def _restore_signals(self):
        for sig, old in self.old_handlers.items():
            signal.signal(sig, old)
        self.old_handlers = {}

    def _on_signal(self, sig, frame):
        """Cleans up, then does what the previous handler would have."""
        old = self.old_handlers.get(sig, signal.SIG_DFL)
        self.close()
        if callable(old):
            old(sig, frame)
        elif old == signal.SIG_DFL:
            os.kill(os.getpid(), sig)


# --- self-check: /usr/bin/python3 scripts/dpstools/netns.py (as root)

PY = "/usr/bin/python3"
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while (b := c.recv(1 << 20)):
    n += len(b)
c.sendall(str(n).encode()); c.close()
"""
CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
size, buf = int(sys.argv[3]), bytes(1 << 20)
t = time.monotonic()
for _ in range(size >> 20):
    c.sendall(buf)
c.shutdown(socket.SHUT_WR); got = int(c.recv(100))
print(got, time.monotonic() - t)
"""


def transfer(hosts, src, dst, size, port=5201):
    """MB/s of a TCP transfer of size bytes from host src to host dst."""
    server = hosts.popen(dst, [PY, "-c", SERVER, hosts.addr(dst), str(port)],
                         stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready", "server did not start"
    p = hosts.run(src, [PY, "-c", CLIENT, hosts.addr(dst), str(port), str(size)], timeout=120,
                  check=True)
    server.wait(timeout=10)
    got, seconds = p.stdout.split()
    assert int(got) == size, f"sent {size} bytes, received {got}"
    return size / float(seconds) / 1e6


def veths():
    """The veths of the root namespace, as `ip -o link` lines."""
    return set(sh("ip", "-o", "link", "show", "type", "veth").splitlines())


def self_check():
    ok, why = available()
    if not ok:
        print(f"skip: {why}")
        return 77
    print("stale namespaces removed:", cleanup_stale())
    real, veths_before = sh("hostname").strip(), veths()
    size = 64 << 20
    with EmulatedHosts(n=2, rate="1gbit") as hosts:
        names = [hosts.run(i, ["hostname"], check=True).stdout.strip() for i in range(2)]
        print("hostnames inside:", names, "real:", real)
        assert names == [hosts.hostname(0), hosts.hostname(1)], names
        assert sh("hostname").strip() == real, "the real hostname changed"
        slow = transfer(hosts, 1, 0, size)
        print(f"1gbit: {slow:.1f} MB/s (TCP payload of 1 Gbit/s: ~119.5)")
        assert 95 < slow < 135, f"1gbit shaping gave {slow:.1f} MB/s"
        hosts.shape("10gbit")
        fast = transfer(hosts, 1, 0, size)
        print(f"10gbit: {fast:.1f} MB/s")
        assert fast > 1.5 * slow, f"10gbit no faster than 1gbit: {fast:.1f} MB/s"
        pid = hosts.pid
    names = [ns for ns in netns_names() if ns.startswith(f"dps{pid}-")]
    new_veths = veths() - veths_before
    assert not names and not new_veths, f"left behind: {names} {new_veths}"
    print("clean: no namespaces or veths left")
    return 0


if __name__ == "__main__":
    raise SystemExit(self_check())
