"""``deep500lite emulate --hosts N --bandwidth RATE [--latency T] -- COMMAND``: run a command on emulated hosts.

The hosts are network namespaces on this machine joined through a bridge, each host's link shaped
(:mod:`deep500lite.lv3.emulate`). COMMAND runs in a head namespace with ``$DEEP500LITE_HOSTFILE``
naming the hosts, so ``deep500lite launch``, ``run -n``, ``bench allreduce`` and ``bench spatial``
start their ranks on them without flags (plain ``mpiexec`` too: ``HYDRA_HOST_FILE``). The exit
status is COMMAND's. On SIGINT, SIGTERM or SIGHUP the signal goes to COMMAND, which gets
``--grace`` seconds to end; then, as after any ending, every process left in the namespaces is
killed and the namespaces, their links and files are removed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys

from deep500lite.cli.args import positive_int, positive_seconds
from deep500lite.errors import SignalReceived, UserError

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    """Add ``emulate`` to the CLI's subparsers; returns its parser."""
    p = subparsers.add_parser(
        "emulate", help="run a command on N emulated hosts (network namespaces) with shaped links; needs root",
        description=("Create N hosts on this machine (network namespaces joined through veth pairs and a bridge), "
                     "shape each host's link (tbf; netem for --latency), and run COMMAND with "
                     "$DEEP500LITE_HOSTFILE naming the hosts: 'deep500lite launch', 'run -n', 'bench allreduce' "
                     "and 'bench spatial' start their ranks on them, talking TCP through the shaped links. "
                     "Everything is removed afterwards, also when COMMAND fails or the command is interrupted. "
                     "Needs root and iproute2. See docs/hosts.md."))
    p.add_argument("--hosts", type=positive_int, required=True, metavar="N", help="number of emulated hosts")
    p.add_argument("--bandwidth", required=True, metavar="RATE",
                   help="each host's link rate, both ways: 100mbit, 1gbit, 2.5gbit, ... or none (unshaped)")
    p.add_argument("--latency", default=None, metavar="T",
                   help="one-way delay added between two hosts (5ms, 200us); needs the kernel's netem")
    p.add_argument("--burst", type=positive_int, default=None, metavar="BYTES",
                   help="depth of each link's token bucket: what passes at once after a pause (default: 100 us at "
                        "the rate, at least 3028); raise it when a loaded machine cannot hold the rate")
    p.add_argument("--slots", type=positive_int, default=1, metavar="K",
                   help="slots per host in the host file: ranks a host takes before the next (default 1)")
    p.add_argument("--grace", type=positive_seconds, default=10.0, metavar="SECONDS",
                   help="after a signal, seconds COMMAND has to end before everything is killed (default 10)")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="the command to run (put '--' before it)")
    p.set_defaults(func=run)
    return p


def _raise(signum, frame):
    raise SignalReceived(signum)


def run(args) -> int:
    """Run ``deep500lite emulate``; returns COMMAND's exit status (128 + N when ended by signal N)."""
    from deep500lite.lv3.emulate import EmulatedHosts, parse_bandwidth, parse_latency

    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("emulate needs a command to run on the hosts, after '--', e.g. 'deep500lite emulate --hosts 2 "
                        "--bandwidth 100mbit -- deep500lite bench allreduce -n 2'. Received: no command")
    if not shutil.which(command[0]):
        raise UserError(f"emulate runs COMMAND, but {command[0]!r} is not an executable file nor on PATH. "
                        f"Received: {command[0]!r}")
    bandwidth = parse_bandwidth(args.bandwidth)
    latency = None if args.latency is None else parse_latency(args.latency)
    hosts = EmulatedHosts(args.hosts, bandwidth, latency, args.slots, args.burst)
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, _raise) for s in handled}
    proc = None
    try:
        hosts.start()
        print(f"deep500lite emulate: {hosts.describe()}; running: {' '.join(command)}", file=sys.stderr, flush=True)
        proc = hosts.popen(command)
        rc = proc.wait()
        return 128 - rc if rc < 0 else rc
    except SignalReceived as stop:
        rc = 128 + stop.signum
        if proc is not None:
            _end(proc, stop.signum, args.grace)
        print(f"deep500lite emulate: stopped by {signal.Signals(stop.signum).name}; removing the hosts",
              file=sys.stderr, flush=True)
        return rc
    finally:
        for s in handled:  # nothing may interrupt the clean-up
            signal.signal(s, signal.SIG_IGN)
        hosts.close()
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _end(proc: subprocess.Popen, signum: int, grace: float) -> None:
    """Pass ``signum`` to COMMAND's process group and wait up to ``grace`` seconds for COMMAND to end."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    except SignalReceived:  # a second signal while waiting: stop waiting
        pass
