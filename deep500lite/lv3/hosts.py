"""Host lists for multi-rank jobs: ``--hosts``, ``--hostfile``, ``$DEEP500LITE_HOSTFILE`` and Slurm allocations.

A job with hosts starts its ranks through MPICH's launcher, hydra (the ``mpiexec`` of the
``mpich`` wheel): hydra starts one proxy per host, by ``ssh`` unless told otherwise (its own
``HYDRA_LAUNCHER`` and ``HYDRA_LAUNCHER_EXEC`` environment variables choose another, as
``deep500lite emulate`` does), and the proxy starts that host's ranks. Where the hosts come from,
first match wins:

1. ``--hosts node1:2,node2:2`` (``HOST[:SLOTS]``, slots default 1);
2. ``--hostfile FILE``: one host a line, MPICH's ``HOST[:SLOTS]`` or Open MPI's ``HOST slots=N``,
   ``#`` comments and blank lines ignored;
3. the file named by :data:`HOSTFILE_ENV` (``deep500lite emulate`` sets it for its command);
4. a Slurm allocation (``SLURM_JOB_ID`` with ``SLURM_JOB_NODELIST``, as ``salloc`` and ``sbatch``
   set them): hydra's Slurm launcher, ``mpiexec -launcher slurm -hosts node01:2,node02:2``, the
   nodes and their slots read here from ``SLURM_JOB_NODELIST`` and ``SLURM_TASKS_PER_NODE``;
   hydra then runs ``srun --nodelist node01,node02 -N 2 -n 2 ... hydra_pmi_proxy ...``, one proxy
   a node, inside the allocation. Where the node list cannot be read here, ``-launcher slurm -rmk
   slurm`` lets hydra read it (hydra 5.0.2 needs both ``SLURM_NODELIST`` and
   ``SLURM_JOB_NODELIST`` then, which Slurm sets);
5. none: every rank on this machine, as before.

Ranks fill each host's slots in order and wrap around when there are more ranks than slots
(hydra's default placement). A host list is handed to hydra as ``-hosts HOST:SLOTS,...``, so a
host file in Open MPI's format works too.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil

from deep500lite.errors import UserError

__all__ = ["Hosts", "HOSTFILE_ENV", "parse_hosts", "read_hostfile", "slurm_allocation", "expand_nodelist",
           "tasks_per_node", "resolve_hosts", "launcher_args"]

#: A host file used when no ``--hosts``/``--hostfile`` is given (``deep500lite emulate`` sets it).
HOSTFILE_ENV = "DEEP500LITE_HOSTFILE"

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_HOSTS_FORMAT = "HOST[:SLOTS],... such as node1:2,node2:2 (SLOTS a whole number >= 1, default 1)"


@dataclasses.dataclass(frozen=True)
class Hosts:
    """The hosts of a job and where they came from.

    Attributes:
        entries: ``(host, slots)`` pairs in order; empty for a Slurm allocation whose node list
            could not be read here (hydra reads it itself).
        source: where the list came from, for messages (``--hostfile hosts.txt``).
        slurm_job: the Slurm job id when the hosts are a Slurm allocation, else None.
    """

    entries: tuple = ()
    source: str = ""
    slurm_job: str | None = None

    @property
    def names(self) -> list[str]:
        """The host names, in order."""
        return [host for host, _ in self.entries]

    @property
    def slots(self) -> int | None:
        """The slots of all hosts together (None when unknown)."""
        return sum(n for _, n in self.entries) or None

    def mpiexec_args(self) -> list[str]:
        """The arguments that give hydra (MPICH's ``mpiexec``) these hosts, placed before ``-n``."""
        if self.slurm_job is not None and not self.entries:
            return ["-launcher", "slurm", "-rmk", "slurm"]
        if self.slurm_job is not None:  # srun starts one proxy on each node of the list
            return ["-launcher", "slurm", "-hosts", ",".join(f"{host}:{n}" for host, n in self.entries)]
        return ["-hosts", ",".join(f"{host}:{n}" for host, n in self.entries)]

    def placement(self, ranks: int) -> list[tuple[str, int]]:
        """How many of ``ranks`` ranks each host gets (hydra's default: fill the slots in order, wrap around).

        Returns:
            ``(host, ranks)`` pairs for the hosts that get at least one rank; empty when the
            hosts are not known here.
        """
        counts = dict.fromkeys(self.names, 0)
        left = ranks
        while left > 0 and self.entries:
            for host, n in self.entries:
                take = min(n, left)
                counts[host] += take
                left -= take
                if left == 0:
                    break
        return [(host, n) for host, n in counts.items() if n]

    def describe(self, ranks: int | None = None) -> str:
        """One line: the hosts, their slots and where they came from (and each host's ranks, given ``ranks``)."""
        if not self.entries:
            return f"the hosts of {self.source} (read by mpiexec)"
        if ranks is not None:
            parts = [f"{host} ({n} rank{'s' if n > 1 else ''})" for host, n in self.placement(ranks)]
        else:
            parts = [f"{host} ({n} slot{'s' if n > 1 else ''})" for host, n in self.entries]
        shown = ", ".join(parts[:8]) + (f", ... ({len(parts) - 8} more)" if len(parts) > 8 else "")
        count = len(self.entries)
        return f"{count} host{'s' if count > 1 else ''} from {self.source}: {shown}"


def _entry(host: str, slots: str | None, where: str, example: str, received: str) -> tuple[str, int]:
    if not _NAME.match(host) or (slots is not None and not (slots.isdigit() and int(slots) >= 1)):
        raise UserError(f"{where} must be {example}. Received: {received!r}")
    return host, 1 if slots is None else int(slots)


def parse_hosts(text: str, flag: str = "--hosts") -> Hosts:
    """A host list ``node1:2,node2:2`` (``HOST[:SLOTS]``, comma-separated; slots default 1).

    Raises:
        UserError: an empty list, a malformed entry, or slots that are not a whole number >= 1.
    """
    items = [item.strip() for item in str(text).split(",")]
    if not any(items) or not all(items):
        raise UserError(f"{flag} must be {_HOSTS_FORMAT}. Received: {flag} {text!r}")
    entries = []
    for item in items:
        host, _, slots = item.partition(":")
        entries.append(_entry(host, slots if ":" in item else None, f"each host of {flag}", _HOSTS_FORMAT, item))
    return Hosts(tuple(entries), f"{flag} {text}")


def read_hostfile(path: str, flag: str = "--hostfile") -> Hosts:
    """The hosts of a host file: one a line, ``HOST``, ``HOST:SLOTS`` (MPICH) or ``HOST slots=N`` (Open MPI).

    ``#`` starts a comment; blank lines are ignored.

    Raises:
        UserError: a missing or unreadable file, a file without hosts, or a line in neither format.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{flag} must name a readable host file (one HOST[:SLOTS] a line). Received: {path!r} "
                        f"({type(exc).__name__}: {exc})") from None
    entries = []
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"line {number} of the host file {path} ({flag})"
        fmt = "HOST, HOST:SLOTS or HOST slots=N (SLOTS a whole number >= 1)"
        if len(words) == 1:
            host, sep, slots = words[0].partition(":")
            entries.append(_entry(host, slots if sep else None, where, fmt, line.strip()))
        elif len(words) == 2 and words[1].startswith("slots="):
            entries.append(_entry(words[0], words[1][len("slots="):], where, fmt, line.strip()))
        else:
            raise UserError(f"{where} must be {fmt}. Received: {line.strip()!r}")
    if not entries:
        raise UserError(f"{flag} {path} names no host: give one HOST[:SLOTS] a line. Received: a file with "
                        f"{len(lines)} line(s) and no host")
    return Hosts(tuple(entries), f"{flag} {path}")


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed node list as host names: ``node[01-03,07],gpu1`` -> node01, node02, node03, node07, gpu1.

    Raises:
        UserError: unbalanced brackets or a range that is not ``LOW-HIGH`` of digits.
    """
    names, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            if text[start:i].strip():
                names.extend(_expand_one(text[start:i].strip(), text))
            start = i + 1
        if depth < 0:
            break
    if depth != 0:
        raise UserError(f"A Slurm node list must have balanced brackets, e.g. node[01-04],gpu1. Received: {text!r}")
    return names


def _expand_one(item: str, whole: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if not match:
        return [item]
    head, ranges, tail = match.groups()
    out = []
    for part in ranges.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UserError(f"A Slurm node list's brackets hold numbers and LOW-HIGH ranges, e.g. node[01-04,07]. "
                            f"Received: {whole!r}")
        for k in range(int(low), int(high if sep else low) + 1):
            out.extend(_expand_one(f"{head}{k:0{len(low)}d}{tail}", whole))
    return out


def tasks_per_node(text: str) -> list[int]:
    """Slurm's ``SLURM_TASKS_PER_NODE``: ``2(x3),1`` -> [2, 2, 2, 1].

    Raises:
        UserError: a malformed value.
    """
    out = []
    for part in str(text).split(","):
        match = re.match(r"^\s*(\d+)(?:\(x(\d+)\))?\s*$", part)
        if not match:
            raise UserError(f"SLURM_TASKS_PER_NODE must look like 2(x3),1. Received: {text!r}")
        out.extend([int(match.group(1))] * int(match.group(2) or 1))
    return out


def slurm_allocation(env=None) -> Hosts | None:
    """The Slurm allocation this process runs in (``SLURM_JOB_ID`` and a node list), else None.

    The hosts and their slots come from ``SLURM_JOB_NODELIST`` (or ``SLURM_NODELIST``) and
    ``SLURM_TASKS_PER_NODE``; where those cannot be read here the entries stay empty and hydra
    reads them itself.
    """
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job or not nodelist:
        return None
    try:
        names = expand_nodelist(nodelist)
        tasks = tasks_per_node(env["SLURM_TASKS_PER_NODE"]) if env.get("SLURM_TASKS_PER_NODE") else [1] * len(names)
    except UserError:
        names, tasks = [], []
    entries = tuple(zip(names, tasks)) if len(tasks) == len(names) else ()
    return Hosts(entries, f"the Slurm allocation (job {job})", slurm_job=str(job))


def resolve_hosts(hosts: str | None = None, hostfile: str | None = None, env=None,
                  which=shutil.which) -> Hosts | None:
    """The hosts of a job: ``hosts``, else ``hostfile``, else :data:`HOSTFILE_ENV`, else a Slurm allocation, else None.

    Args:
        hosts: ``--hosts``'s value (``node1:2,node2:2``) or None.
        hostfile: ``--hostfile``'s value or None.
        env: the environment to read (default: this process's).
        which: finds ``srun`` on PATH (a Slurm allocation needs it).

    Raises:
        UserError: both flags, a bad list or file, or a Slurm allocation without ``srun``.
    """
    env = os.environ if env is None else env
    if hosts is not None and hostfile is not None:
        raise UserError(f"Give the hosts either with --hosts or with --hostfile, not both. Received: --hosts {hosts} "
                        f"--hostfile {hostfile}")
    if hosts is not None:
        return parse_hosts(hosts)
    if hostfile is not None:
        return read_hostfile(hostfile)
    if env.get(HOSTFILE_ENV):
        return read_hostfile(env[HOSTFILE_ENV], f"${HOSTFILE_ENV}")
    found = slurm_allocation(env)
    if found is not None and not which("srun", path=env.get("PATH")):
        raise UserError(f"This process runs in {found.source}, whose ranks mpiexec starts with srun, but srun is "
                        f"not on PATH; put Slurm's bin folder on PATH, or give the hosts with --hosts or --hostfile "
                        f"(--hosts localhost:N for this machine only). Received: SLURM_JOB_ID={found.slurm_job} and "
                        f"no srun")
    return found


def launcher_args(hosts: Hosts | None) -> list[str]:
    """``hosts.mpiexec_args()``, or nothing when the job runs on this machine only."""
    return [] if hosts is None else hosts.mpiexec_args()
