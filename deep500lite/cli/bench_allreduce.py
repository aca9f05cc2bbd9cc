"""``deep500lite bench allreduce``: allreduce algorithms over message sizes, against the alpha-beta model.

Wired into ``deep500lite bench`` by :func:`add_subparser`; the work is in :mod:`deep500lite.bench.allreduce`.
"""

from __future__ import annotations

import contextlib
import os
import sys

from deep500lite.cli.args import (Choice, Integer, OneOf, Path, Size, Text, add_host_options, add_job_limit_options,
                                  hosts_from_args, positive_int, positive_seconds)
from deep500lite.errors import StartupTimeout, UserError
from deep500lite.lv3.launch import STARTUP_TIMEOUT_ENV, JobTimeout, check_ranks, oversubscription_note, resolve_timeouts
from deep500lite.escaping import terminal
from deep500lite.metrics.tables import TABLE_FORMATS
from deep500lite.utils import atomic_write_text, finite_json

__all__ = ["add_subparser", "run", "load_calibration_file", "DEFAULT_ROUNDS"]

# --interleave's default: 48 rounds were within 20% at every row more often than 24 on the 2-core
# VM (docs/scaling.md); each cell's time is --max-time whatever the rounds.
DEFAULT_ROUNDS = 48


#: A message size: a multiple of 4 bytes (float32 elements), at most 16 GiB (each rank holds a few such buffers).
_MESSAGE_SIZE = Size(minimum=4, maximum=2**34, multiple_of=4)


def add_subparser(sub):
    """Add ``allreduce`` to the ``bench`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser(
        "allreduce", help="allreduce algorithms over MPI: time, algbw/busbw and the alpha-beta prediction",
        description=("Launch an MPI job on N ranks (mpiexec underneath) and time each allreduce algorithm (native, "
                     "ring, recursive_doubling, rabenseifner, tree, auto) for each message size; print nccl-tests' "
                     "table (size in bytes, count, type, redop, root, time in us, algbw, busbw, #wrong, out-of-place "
                     "and in-place) and its average bus bandwidth line, then the median with its 95% CI beside the "
                     "alpha-beta model's prediction. A short calibration run of the real algorithms first fits "
                     "alpha, beta, gamma and a memory-copy cost (least squares); each row shows that model's "
                     "prediction and its relative error, and auto chooses by it. See docs/distributed.md and "
                     "docs/scaling.md."))
    p.add_argument("-n", "--ranks", type=positive_int, default=2, help="number of MPI ranks, at least 2 (default 2)")
    p.add_argument("--algorithms", type=Text(max_length=1024), default=",".join(_default_algorithms()),
                   help="comma-separated: native, ring, recursive_doubling, rabenseifner, tree, auto (default all)")
    p.add_argument("--min-bytes", type=_MESSAGE_SIZE, default="4", help="smallest message, e.g. 4, 1KiB (default 4)")
    p.add_argument("--max-bytes", type=_MESSAGE_SIZE, default="64MiB", help="largest message, e.g. 256MiB (default 64MiB)")
    p.add_argument("--factor", type=Integer(minimum=2, maximum=1 << 30), default=4, help="each size is this many times the last (default 4)")
    p.add_argument("--max-time", type=positive_seconds, default=0.5, metavar="SECONDS",
                   help="seconds of timed calls per size and algorithm, roughly; at least 3 calls (default 0.5)")
    p.add_argument("--timeout", type=positive_seconds, default=120.0, metavar="SECONDS",
                   help="a rank waiting longer than this in one communication ends the job with an error naming "
                        "it (default 120)")
    add_job_limit_options(p, job_flag="--job-timeout")
    add_host_options(p)
    p.add_argument("--mpiexec", type=Path("program"), default=None, help="the MPI launcher (default: the one beside this Python, else PATH)")
    p.add_argument("--model", type=Path("input"), default=None, metavar="FILE",
                   help="use this calibration file (from --save-model) instead of calibrating first")
    p.add_argument("--save-model", type=Path("output"), default=None, metavar="FILE",
                   help="write the model fitted to the real algorithms here, with the environment (rank counts "
                        "already in the file are kept); 'auto' uses it when DEEP500LITE_ALLREDUCE_MODEL names it")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the short calibration of the real algorithms (no calibrated predictions)")
    p.add_argument("--passes", type=positive_int, default=1, metavar="K",
                   help="calibrate and measure K times, alternating; the model is fitted to the median of the "
                        "calibration passes, each row pools its passes and shows how far its median moved between "
                        "them (the machine's own repeatability; default 1)")
    p.add_argument("--interleave", type=Integer(minimum=0, maximum=100_000), default=None, metavar="ROUNDS",
                   help="time every calibration size and every row once per round, in a new shuffled order each "
                        "round, ROUNDS >= 3 rounds (auto chooses by a first fit to the pilot calls): the model and the "
                        "rows it predicts then see the same machine, even one whose speed drifts; each row shows how "
                        f"far its median moved between the thirds of the rounds (default {DEFAULT_ROUNDS}, or off with "
                        "--passes; 0: off)")
    p.add_argument("--calibration-factor", type=Integer(minimum=2, maximum=1024), default=None, metavar="F",
                   help="calibrate at sizes from 16 KiB (or --min-bytes if smaller) to --max-bytes, each F times "
                        "the last (2: every power of two); default: 16 KiB, 128 KiB, 1 MiB, 4 MiB, 16 MiB, 64 MiB up "
                        "to twice --max-bytes")
    p.add_argument("--release-memory", action="store_true",
                   help="let each rank's C allocator give freed memory back to the kernel, its default; without "
                        "it the ranks keep it (glibc), so that a size timed again after a pause does not touch "
                        "fresh pages (docs/scaling.md)")
    p.add_argument("--evict", type=OneOf(Choice(("auto",), case_insensitive=True), Size(minimum=0, maximum=2**40,
                                                                                  multiple_of=4)),
                   default=None, metavar="BYTES",
                   help="while calibrating, also time cold calls, each after every rank read BYTES (e.g. 32MiB), "
                        "as the first allreduce of a training step follows compute; the model adds their extra "
                        "cost to such calls (model scaling). Default auto: the last-level cache's size; 0: none")
    p.add_argument("--format", choices=TABLE_FORMATS, default="table", help="table, markdown or csv (default table)")
    p.add_argument("--json", type=Path("output"), default=None, metavar="FILE",
                   help="write every raw sample, the model and the environment here")
    p.add_argument("--plot", type=Path("output"), default=None, metavar="FILE",
                   help="write a PNG: time per size and algorithm with the alpha-beta prediction, and busbw "
                        "(needs matplotlib)")
    p.set_defaults(func=run)
    return p


def _default_algorithms():
    from deep500lite.bench.allreduce import DEFAULT_ALGORITHMS

    return DEFAULT_ALGORITHMS


def load_calibration_file(path: str, flag: str):
    """Load an allreduce calibration file given with ``flag``; a bad file is a :class:`UserError` naming both.

    Returns:
        The :class:`~deep500lite.perfmodel.allreduce.CalibratedModel`.
    """
    from deep500lite.perfmodel.allreduce import CalibratedModel

    try:
        return CalibratedModel.load(path)
    except UserError as exc:
        raise UserError(f"{flag} must name a calibration file written by 'deep500lite bench allreduce "
                        f"--save-model'; {path!r} is not one: {exc}") from None


def _evict_bytes(text: str, bench) -> int:
    """``--evict``'s bytes: ``auto`` is the last-level cache's size; a size must be a multiple of 4 bytes or 0."""

    if str(text).strip().lower() == "auto":
        return bench.last_level_cache_bytes()
    try:
        n = bench.parse_bytes(text)
    except UserError:
        n = None
    if n is None or n % 4:
        raise UserError(f"--evict must be auto, 0 (no cold calls) or a size in bytes, a multiple of 4, such as "
                        f"32MiB. Received: --evict {text!r}")
    return n


@contextlib.contextmanager
def _startup_timeout(seconds):
    """The start-up timeout for the job that :func:`run_allreduce_benchmark` starts (through the environment)."""

    saved = os.environ.get(STARTUP_TIMEOUT_ENV)
    os.environ[STARTUP_TIMEOUT_ENV] = repr(seconds)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(STARTUP_TIMEOUT_ENV, None)
        else:
            os.environ[STARTUP_TIMEOUT_ENV] = saved


def run(args) -> int:
    """Run ``deep500lite bench allreduce`` from parsed arguments; returns the exit status (1 if any data was wrong)."""
    from deep500lite.bench import allreduce as bench

    if args.min_bytes > args.max_bytes:
        raise UserError(f"--min-bytes must not be larger than --max-bytes. Received: --min-bytes {args.min_bytes} "
                        f"--max-bytes {args.max_bytes}")
    sizes = bench.message_sizes(args.min_bytes, args.max_bytes, args.factor)
    algorithms = bench.parse_algorithms(args.algorithms)
    hosts = hosts_from_args(args)
    check_ranks(args.ranks, "-n", args.oversubscribe, hosts)
    if args.interleave is None:
        args.interleave = 0 if args.passes > 1 else DEFAULT_ROUNDS
    if args.interleave != 0 and args.interleave < 3:
        raise UserError(f"--interleave must be a number of rounds, at least 3 (0: off). Received: --interleave "
                        f"{args.interleave}")
    if args.calibration_factor is not None and args.calibration_factor < 2:
        raise UserError(f"--calibration-factor must be a whole number >= 2. Received: --calibration-factor "
                        f"{args.calibration_factor}")
    if args.calibration_factor is not None and (args.model or args.no_calibrate):
        raise UserError(f"--calibration-factor sets the sizes of the calibration run; there is none with "
                        f"{'--model' if args.model else '--no-calibrate'}. Received: --calibration-factor "
                        f"{args.calibration_factor}")
    if args.interleave and args.passes > 1:
        raise UserError(f"--interleave times calibration and rows in the same rounds; it replaces --passes. "
                        f"Received: --interleave {args.interleave} --passes {args.passes}")
    job_timeout, startup_timeout = resolve_timeouts(args.job_timeout, args.startup_timeout, flag="--job-timeout")
    if args.model and (args.save_model or args.no_calibrate):
        raise UserError("--model uses a calibration file; it cannot be combined with --save-model or "
                        f"--no-calibrate. Received: --model {args.model!r} with "
                        f"{'--save-model' if args.save_model else '--no-calibrate'}")
    if args.model:
        load_calibration_file(args.model, "--model")
    if args.evict is not None and (args.model or args.no_calibrate):
        raise UserError(f"--evict sets the cold calls of the calibration run; there is none with "
                        f"{'--model' if args.model else '--no-calibrate'}. Received: --evict {args.evict}")
    evict = _evict_bytes("auto" if args.evict is None else args.evict, bench)
    note = oversubscription_note(args.ranks, "time of each allreduce", hosts)
    if note:
        print(note, file=sys.stderr if args.format == "csv" else sys.stdout, flush=True)
    try:
        with _startup_timeout(startup_timeout):
            result = bench.run_allreduce_benchmark(args.ranks, sizes, algorithms, max_time=args.max_time,
                                                   comm_timeout=args.timeout, mpiexec=args.mpiexec,
                                                   model_file=args.model, save_model=args.save_model,
                                                   calibrate=not args.no_calibrate, job_timeout=job_timeout,
                                                   passes=args.passes, interleave=args.interleave,
                                                   calibration_factor=args.calibration_factor,
                                                   keep_memory=not args.release_memory, evict_bytes=evict,
                                                   hosts=hosts)
    except StartupTimeout:
        raise
    except JobTimeout as exc:
        raise JobTimeout(f"bench allreduce: {exc}; pass a larger --job-timeout if it is just slow. Received: "
                         f"--job-timeout {job_timeout:g}") from None
    text = sys.stderr if args.format == "csv" else sys.stdout
    print(f"allreduce of float32 sums on {result.ranks} ranks ({result.mpi_library})"
          + (f" on {hosts.describe(result.ranks)}" if hosts is not None else ""), file=text)
    print(f"freed memory: {result.allocator}", file=text)
    print(result.describe_model(), file=text)
    if result.calibration:
        print(result.describe_calibration(), file=text)
    from deep500lite.bench.allreduce_table import model_table, render_nccl

    print(render_nccl(result, args.format), flush=True)
    if args.format != "csv":
        print("\nmeasured against the alpha-beta model:")
        print(model_table(result).render(args.format), flush=True)
    for line in result.summary():
        print(terminal(line), file=text)
    wrong = result.total_wrong()
    print(f"data check: {wrong} wrong elements" + (" -- SOME RESULTS ARE WRONG" if wrong else ""), file=text)
    if args.json:
        from deep500lite.environment import collect_environment

        payload = result.to_dict()
        payload["environment"] = collect_environment()
        atomic_write_text(args.json, finite_json(payload, indent=1, default=str))
        print(f"wrote {args.json}", file=text)
    if args.save_model and result.calibration:
        print(f"wrote the calibrated model to {args.save_model}", file=text)
    if args.plot:
        print(f"wrote {result.plot(args.plot)}", file=text)
    return 1 if wrong else 0
