"""Emulated hosts on one machine: network namespaces joined through a bridge, each host's link shaped.

:class:`EmulatedHosts` builds, with iproute2 (``ip``, ``tc``) and util-linux (``unshare``)::

    head namespace  (the command runs here, as on a cluster's login node)
      br0 10.77.0.254/24 -- v1 ==veth== eth0 10.77.0.1  namespace host1
                         -- v2 ==veth== eth0 10.77.0.2  namespace host2  ...

Each host's link is shaped both ways: a token bucket (``tc ... tbf``) on the host's ``eth0``
(what it sends) and on the bridge's ``vK`` (what it receives), so traffic between two hosts
crosses two buckets of the same rate. ``latency`` adds ``netem`` delay, half on each side, where
the kernel has netem (:class:`NetemMissing` otherwise). Each namespace gets its own ``/etc/hosts``
(``/etc/netns/NAME/hosts``, which ``ip netns exec`` mounts over ``/etc/hosts``): ``hostK``
names its address, and this machine's host name names the head, so that hydra's proxies reach
``mpiexec`` there.

Ranks start through MPICH's hydra with :attr:`EmulatedHosts.launcher` in place of ``ssh``
(``HYDRA_LAUNCHER=rsh``, ``HYDRA_LAUNCHER_EXEC``): hydra calls it as ``SCRIPT HOST COMMAND...``
and it runs the command in that host's namespace, in a UTS namespace of its own whose host name
is ``hostK``. So each rank sees its own host name and address, as on a real cluster, and ranks on
different hosts talk TCP through the shaped links: MPICH treats ranks of different proxies as
different nodes (no shared memory between them), and :meth:`EmulatedHosts.env` keeps UCX and
libfabric, the network libraries under MPICH's ch4 device, on TCP over ``eth0``
(``UCX_TLS=tcp,self``: UCX would otherwise find the other "host" on the same machine and use its
shared-memory transports). torch.distributed (gloo) finds the hosts by their names.

Names are ``d5e<pid>-<k>-head`` and ``d5e<pid>-<k>-host<i>``, so parallel runs do not collide. A
lock file (:data:`LOCK_DIR`) held for the lifetime of the hosts tells a live owner from a dead one:
:func:`clean_stale` removes the namespaces of owners that are gone (killed with SIGKILL). Closing
kills every process left in the namespaces, deletes them (their links go with them) and removes
the files. Everything needs root.
"""

from __future__ import annotations

import dataclasses
import fcntl
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from deep500lite.errors import NetemMissing, UserError
from deep500lite.lv3.launch import kill_pids

__all__ = ["EmulatedHosts", "NetemMissing", "parse_bandwidth", "parse_latency", "clean_stale", "live_namespaces",
           "processes_in", "PREFIX", "LOCK_DIR", "SUBNET", "check_requirements", "format_rate", "default_burst",
           "remove"]

#: Prefix of every namespace (and ``/etc/netns`` folder) this module creates.
PREFIX = "d5e"
#: Where the owners' lock files live.
LOCK_DIR = "/run/deep500lite-emulate"
#: The emulated hosts' network (inside the namespaces only: nothing is added to this machine's).
SUBNET = "10.77.0"
_HEAD_ADDRESS = f"{SUBNET}.254"
_MAX_HOSTS = 253
_TAG = re.compile(rf"^({PREFIX}(\d+)-\d+)-(head|host\d+)$")
_counter = itertools.count()

_BIT_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_bandwidth(text: str) -> int | None:
    """A link rate in bits per second: ``100mbit``, ``1gbit``, ``2.5Gbit/s``, ``500kbit``; ``none`` for unshaped.

    Returns:
        Bits per second, or None for ``none`` (the link is left as fast as the machine makes it).

    Raises:
        UserError: anything else (units are tc's bit units: bit, kbit, mbit, gbit, tbit).
    """
    value = str(text).strip().lower()
    if value in ("none", "unshaped", "unlimited"):
        return None
    match = re.match(r"^(\d+(?:\.\d*)?|\.\d+)\s*(bit|kbit|mbit|gbit|tbit)(?:/s)?$", value)
    bits = float(match.group(1)) * _BIT_UNITS[match.group(2)] if match else 0.0
    if not match or not 1e3 <= bits <= 1e13:
        raise UserError(f"--bandwidth must be a rate such as 100mbit, 1gbit or 2.5gbit (units bit, kbit, mbit, gbit, "
                        f"tbit per second; from 1kbit to 10tbit), or none for links left unshaped. Received: {text!r}")
    return int(round(bits))


def parse_latency(text: str) -> float:
    """A one-way latency: ``5ms``, ``200us``, ``0.01s`` or plain seconds.

    Raises:
        UserError: anything else, or a latency not between 1 us and 10 s.
    """
    value = str(text).strip().lower()
    match = re.match(r"^(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s)?$", value)
    seconds = float(match.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}[match.group(2)] if match else 0.0
    if not match or not 1e-6 <= seconds <= 10:
        raise UserError(f"--latency must be a one-way delay such as 5ms, 200us or 0.01s (between 1us and 10s). "
                        f"Received: {text!r}")
    return seconds


def format_rate(bits: int | None) -> str:
    """``100 Mbit/s``, ``1 Gbit/s``; ``unshaped`` for None."""
    if bits is None:
        return "unshaped"
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g} {unit}"
    return f"{bits} bit/s"


def _tool(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")


def check_requirements() -> dict:
    """The programs emulation needs (``ip``, ``tc``, ``unshare``), found; root checked.

    Raises:
        UserError: not root, or a program missing (one line naming the Debian package).
    """
    if os.geteuid() != 0:
        raise UserError(f"deep500lite emulate needs root: it creates network namespaces, virtual links and queueing "
                        f"disciplines; run it as root (sudo) or in a root container. Received: user id {os.geteuid()}")
    found = {}
    for name, package in (("ip", "iproute2"), ("tc", "iproute2"), ("unshare", "util-linux")):
        found[name] = _tool(name)
        if not found[name]:
            raise UserError(f"deep500lite emulate needs the program {name!r} (Debian/Ubuntu: apt-get install "
                            f"{package}). Received: no {name} on PATH, /usr/sbin or /sbin")
    return found


def live_namespaces() -> list[str]:
    """The network namespaces named in ``/run/netns`` (what ``ip netns list`` shows)."""
    try:
        return sorted(os.listdir("/run/netns"))
    except OSError:
        return []


def _namespace_inodes(names) -> dict:
    inodes = {}
    for name in names:
        try:
            inodes[os.stat(os.path.join("/run/netns", name)).st_ino] = name
        except OSError:
            pass
    return inodes


def processes_in(names) -> dict[int, str]:
    """The processes whose network namespace is one of ``names``: ``{pid: namespace}`` (from ``/proc``)."""
    inodes = _namespace_inodes(names)
    found = {}
    if not inodes:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            inode = os.stat(f"/proc/{entry}/ns/net").st_ino
        except OSError:
            continue
        if inode in inodes:
            found[int(entry)] = inodes[inode]
    return found


def _lock_path(tag: str) -> str:
    return os.path.join(LOCK_DIR, f"{tag}.lock")


def _owner_alive(tag: str) -> bool:
    """Whether the process that made ``tag``'s namespaces still holds them (its lock, else its pid)."""
    try:
        fd = os.open(_lock_path(tag), os.O_RDWR)
    except OSError:
        pid = int(_TAG.match(f"{tag}-head").group(2))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _tags() -> set[str]:
    names = live_namespaces()
    try:
        names += os.listdir("/etc/netns")
    except OSError:
        pass
    try:
        names += [f[:-len(".lock")] + "-head" for f in os.listdir(LOCK_DIR) if f.endswith(".lock")]
    except OSError:
        pass
    return {m.group(1) for m in map(_TAG.match, names) if m}


def remove(tag: str, ip: str = "ip", wait: float = 10.0) -> list[str]:
    """Kill every process in ``tag``'s namespaces, delete them (their links go with them), remove their files
    (``/etc/netns``, and the temporary folder with the host file and the launcher script).

    Returns:
        The namespaces deleted.
    """
    names = [n for n in live_namespaces() if n.startswith(tag + "-")]
    deadline = time.monotonic() + wait
    while True:
        pids = processes_in(names)
        if not pids or time.monotonic() > deadline:
            break
        kill_pids(pids)
        time.sleep(0.05)
    # hosts before the head: the head holds the bridge ends of their links
    for name in sorted(names, key=lambda n: n.endswith("-head")):
        subprocess.run([ip, "netns", "delete", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
    try:
        folders = [f for f in os.listdir("/etc/netns") if f.startswith(tag + "-")]
    except OSError:
        folders = []
    for folder in folders:
        shutil.rmtree(os.path.join("/etc/netns", folder), ignore_errors=True)
    try:
        os.rmdir("/etc/netns")  # only when empty: other programs' folders stay
    except OSError:
        pass
    tmp = tempfile.gettempdir()
    for folder in os.listdir(tmp):  # the host file and launcher script of the hosts
        if folder.startswith(tag + "-") and os.path.isdir(os.path.join(tmp, folder)):
            shutil.rmtree(os.path.join(tmp, folder), ignore_errors=True)
    return names


def clean_stale(ip: str = "ip") -> list[str]:
    """Remove the namespaces of emulations whose owner is gone; returns the tags removed.

    Only names of this module's form (``d5e<pid>-<k>-...``) are touched, and only when their
    owner's lock is free (or, without a lock file, its process is gone).
    """
    removed = []
    for tag in sorted(_tags()):
        if _owner_alive(tag):
            continue
        remove(tag, ip)
        try:
            os.unlink(_lock_path(tag))
        except OSError:
            pass
        removed.append(tag)
    return removed


def default_burst(bits: int) -> int:
    """The token bucket's default depth in bytes: 100 us at the rate, at least two full frames (1514 bytes each).

    A deeper bucket lets more of a message pass at the machine's own speed after a pause, as no
    wire does; a shallower one needs the kernel to send every few tens of microseconds. On the
    loaded 2-core VM (load average 16) a 1 MiB exchange at 1 Gbit/s took 54 ms with this default
    (the wire needs 8.4 ms) and 9.1 ms with 1 ms of traffic (125,000 bytes): raise ``burst`` when
    the achieved rate falls short; at 100 Mbit/s the default held the rate (92-96 ms for 84 ms).
    """
    return max(2 * 1514, int(bits / 8 * 100e-6))


@dataclasses.dataclass
class EmulatedHosts:
    """``hosts`` emulated hosts on this machine (see the module documentation); a context manager.

    Args:
        hosts: how many (1 to 253).
        bandwidth: each host's link rate in bits per second, both ways (None: unshaped).
        latency: one-way delay between two hosts in seconds (None: none added), half on each
            side; needs netem.
        slots: slots per host in the host file (ranks each host takes before the next).
        burst: the token bucket's depth in bytes (None: :func:`default_burst`).

    Attributes (after :meth:`start`):
        names: ``host1`` ... ``hostN``.
        hostfile: the host file (``hostK:SLOTS`` lines).
        launcher: the script hydra runs in place of ``ssh``.
        head: the namespace where commands run.
    """

    hosts: int
    bandwidth: int | None = None
    latency: float | None = None
    slots: int = 1
    burst: int | None = None

    def __post_init__(self):
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or not 1 <= self.hosts <= _MAX_HOSTS:
            raise UserError(f"--hosts must be a number of emulated hosts from 1 to {_MAX_HOSTS}. Received: "
                            f"{self.hosts!r}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1:
            raise UserError(f"--slots must be a whole number >= 1. Received: {self.slots!r}")
        if self.burst is not None and (isinstance(self.burst, bool) or not isinstance(self.burst, int)
                                       or self.burst < 1514):
            raise UserError(f"--burst must be a whole number of bytes, at least one full frame (1514). Received: "
                            f"{self.burst!r}")
        self.tag = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        self.names = [f"host{k}" for k in range(1, self.hosts + 1)]
        self.head = f"{self.tag}-head"
        self.namespaces = {name: f"{self.tag}-{name}" for name in self.names}
        self.addresses = {name: f"{SUBNET}.{k}" for k, name in enumerate(self.names, start=1)}
        self.folder = self.hostfile = self.launcher = None
        self._lock = None
        self._tools = {}

    # ------------------------------------------------------------------ set-up
    def start(self) -> "EmulatedHosts":
        """Create the namespaces, links, shaping and files; on any failure remove what was made and raise.

        Raises:
            UserError: not root, a program missing, or a command that failed (named with its output).
            NetemMissing: ``latency`` on a kernel without netem.
        """
        self._tools = check_requirements()
        clean_stale(self._tools["ip"])
        try:
            self._take_lock()
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def _take_lock(self) -> None:
        os.makedirs(LOCK_DIR, exist_ok=True)
        self._lock = os.open(_lock_path(self.tag), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock, fcntl.LOCK_EX)

    def _run(self, *argv: str, netns: str | None = None) -> None:
        """``ip [-n NETNS] ARGV``, or ``tc ARGV[1:]`` in NETNS when ARGV starts with ``tc``; a failure raises."""
        if argv[0] == "tc":
            cmd = [self._tools["ip"], "netns", "exec", netns, self._tools["tc"], *argv[1:]]
        else:
            cmd = [self._tools["ip"], *(("-n", netns) if netns else ()), *argv]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if done.returncode != 0:
            output = " ".join(done.stdout.split())
            if argv[0] == "tc" and "netem" in argv and ("unknown" in output.lower()
                                                                 or "no such file" in output.lower()):
                raise NetemMissing(f"--latency needs the netem queueing discipline, which this kernel does not have "
                                   f"(tc said: {output}); emulate bandwidth alone, or use a kernel with sch_netem. "
                                   f"Received: --latency {self.latency * 1e3:g}ms")
            raise UserError(f"deep500lite emulate could not set up the hosts: '{' '.join(cmd)}' failed with status "
                            f"{done.returncode}: {output}. Received: {self.hosts} hosts, bandwidth "
                            f"{format_rate(self.bandwidth)}")

    def _create(self) -> None:
        head = self.head
        self._run("netns", "add", head)
        self._run("link", "set", "lo", "up", netns=head)
        if self.latency is not None:  # refuse early, before the hosts, when the kernel has no netem
            self._run("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", netns=head)
            self._run("tc", "qdisc", "del", "dev", "lo", "root", netns=head)
        self._run("link", "add", "br0", "type", "bridge", netns=head)
        self._run("addr", "add", f"{_HEAD_ADDRESS}/24", "dev", "br0", netns=head)
        self._run("link", "set", "br0", "up", netns=head)
        for k, name in enumerate(self.names, start=1):
            ns = self.namespaces[name]
            self._run("netns", "add", ns)
            self._run("link", "set", "lo", "up", netns=ns)
            self._run("link", "add", f"v{k}", "type", "veth", "peer", "name", "eth0", "netns", ns, netns=head)
            self._run("link", "set", f"v{k}", "master", "br0", netns=head)
            self._run("link", "set", f"v{k}", "up", netns=head)
            self._run("addr", "add", f"{self.addresses[name]}/24", "dev", "eth0", netns=ns)
            self._run("link", "set", "eth0", "up", netns=ns)
            self._shape(ns, "eth0")
            self._shape(head, f"v{k}")
        self._write_files()

    def _shape(self, netns: str, device: str) -> None:
        """Shape what ``device`` sends: netem (delay, half the latency) with a tbf child, or tbf alone."""
        parent = ["root"]
        if self.latency is not None:
            self._run("tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "netem", "delay",
                      f"{self.latency / 2 * 1e6:.0f}us", "limit", "100000", netns=netns)
            parent = ["parent", "1:1"]
        if self.bandwidth is not None:
            burst = self.burst or default_burst(self.bandwidth)
            limit = max(4 * burst, int(self.bandwidth / 8 * 0.1))  # 100 ms of queue: drops would time TCP's recovery
            self._run("tc", "qdisc", "add", "dev", device, *parent, "tbf", "rate", f"{self.bandwidth}bit",
                      "burst", str(burst), "limit", str(limit), netns=netns)

    def _write_files(self) -> None:
        self.folder = tempfile.mkdtemp(prefix=f"{self.tag}-")
        me = socket.gethostname()
        lines = ["127.0.0.1 localhost", f"{_HEAD_ADDRESS} {me} head"]
        lines += [f"{self.addresses[name]} {name}" for name in self.names]
        for ns in [self.head, *self.namespaces.values()]:
            folder = os.path.join("/etc/netns", ns)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "hosts"), "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
        self.hostfile = os.path.join(self.folder, "hostfile")
        with open(self.hostfile, "w", encoding="utf-8") as f:
            f.write("".join(f"{name}:{self.slots}\n" for name in self.names))
        self.launcher = os.path.join(self.folder, "enter-host")
        cases = "".join(f"  {name}|{self.addresses[name]}) ns={self.namespaces[name]} ;;\n" for name in self.names)
        with open(self.launcher, "w", encoding="utf-8") as f:
            f.write(f"""#!/bin/sh
# Written by deep500lite emulate. hydra runs 'THIS HOST COMMAND...' in place of 'ssh HOST COMMAND...':
# run COMMAND, as a remote shell would, in HOST's network namespace and a UTS namespace named HOST.
host="$1"; shift
case "$host" in
{cases}  *) echo "deep500lite emulate: no emulated host is named '$host' (they are {' '.join(self.names)})" >&2
     exit 255 ;;
esac
exec {self._tools['ip']} netns exec "$ns" {self._tools['unshare']} --uts /bin/sh -c \\
    'echo "$0" > /proc/sys/kernel/hostname && exec /bin/sh -c "$*"' "$host" "$@"
""")
        os.chmod(self.launcher, 0o755)

    # ------------------------------------------------------------------ use
    def env(self, base=None) -> dict:
        """The environment of a command run on these hosts: ``base`` (default: this process's) without Slurm's
        variables, plus the host file, hydra's launcher and TCP for UCX and libfabric."""
        from deep500lite.lv3.hosts import HOSTFILE_ENV

        env = {k: v for k, v in dict(os.environ if base is None else base).items() if not k.startswith("SLURM_")}
        env.update({HOSTFILE_ENV: self.hostfile, "HYDRA_HOST_FILE": self.hostfile, "HYDRA_LAUNCHER": "rsh",
                    "HYDRA_LAUNCHER_EXEC": self.launcher,
                    # ch4's UCX netmod (the wheel's default) and libfabric (MPIR_CVAR_CH4_NETMOD=ofi): TCP on eth0
                    "UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0"})
        return env

    def popen(self, command, env=None, **kwargs) -> subprocess.Popen:
        """Start ``command`` (a list) in the head namespace with :meth:`env`, in a session of its own."""
        return subprocess.Popen([self._tools["ip"], "netns", "exec", self.head, *command],
                                env=self.env(env), start_new_session=True, **kwargs)

    def run_in(self, host: str, command, **kwargs) -> subprocess.CompletedProcess:
        """Run ``command`` (a list) in ``host``'s namespace and wait (``subprocess.run`` keyword arguments)."""
        return subprocess.run([self._tools["ip"], "netns", "exec", self.namespaces[host], *command], **kwargs)

    def describe(self) -> str:
        """One line: the hosts, their links and the host file."""
        link = (f"each link shaped to {format_rate(self.bandwidth)} both ways (tbf, a "
                f"{self.burst or default_burst(self.bandwidth)}-byte bucket)" if self.bandwidth is not None
                else "links not shaped")
        if self.latency is not None:
            link += f", {self.latency * 1e6:g} us one way between hosts (netem)"
        return (f"{self.hosts} emulated host{'s' if self.hosts > 1 else ''} ({', '.join(self.names[:4])}"
                f"{', ...' if self.hosts > 4 else ''}; {self.slots} slot{'s' if self.slots > 1 else ''} each) on a "
                f"bridge, {link}; host file {self.hostfile}")

    # ------------------------------------------------------------------ tear-down
    def close(self) -> None:
        """Kill every process left in the namespaces, delete them and their links, remove the files. Idempotent."""
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        try:
            old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)  # a second Ctrl-C must not stop the clean-up
        except (ValueError, OSError):
            old = None
        try:
            remove(self.tag, self._tools.get("ip") or _tool("ip") or "ip")
            if self.folder:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None
            if self._lock is not None:
                try:
                    os.unlink(_lock_path(self.tag))
                except OSError:
                    pass
                os.close(self._lock)
                self._lock = None
        finally:
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def __enter__(self) -> "EmulatedHosts":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.close()
        return False
