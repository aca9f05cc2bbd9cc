"""``deep500lite bench allreduce``: every allreduce algorithm over message sizes, against two cost models.

:func:`run_allreduce_benchmark` launches ``mpiexec -n N python -m mpi4py -m
deep500lite.bench.allreduce_worker CONFIG`` (:func:`deep500lite.bench.allreduce_worker.worker_main`),
which on every rank
measures the ping-pong alpha-beta model, then calibrates (or loads) the model fitted to the real
algorithms (:mod:`deep500lite.perfmodel.allreduce`), which ``auto`` then uses; then for each message
size and algorithm it runs one checked warm-up call, sizes the repetitions from a short pilot,
and times each call between barriers. Each row carries both predictions and the fitted model's
relative error against the measured median.
A call's time is the slowest rank's. With ``interleave`` (``--interleave ROUNDS``) the calibration
sizes and the rows are instead timed a few calls at a time, every one once per round, in an order
shuffled anew each round, so that the fit and the rows it predicts see the same machine. Rank 0
writes the raw samples to a JSON file that the launching process reads back into an
:class:`AllreduceBenchmark`.

Bandwidths follow the nccl-tests definitions: ``algbw = S / t`` and
``busbw = algbw * 2 (p-1) / p`` for an allreduce of ``S`` bytes on ``p`` ranks.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import sys
import tempfile

import numpy as np

from deep500lite.errors import UserError, format_choices
from deep500lite.lv3.allreduce import ALGORITHMS
from deep500lite.lv3.hosts import launcher_args
from deep500lite.lv3.launch import find_mpiexec, run_job

__all__ = ["AllreduceBenchmark", "COLD_CALLS", "DEFAULT_ALGORITHMS", "RELEASED_MEMORY", "calibration_sizes",
           "keep_freed_memory", "last_level_cache_bytes", "message_sizes", "parse_bytes", "parse_algorithms",
           "pass_spread", "run_allreduce_benchmark"]

DEFAULT_ALGORITHMS = ALGORITHMS
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
_ITEMSIZE = 4  # float32
# glibc's mallopt parameter numbers (malloc.h) and the trim threshold kept_freed_memory sets
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_TRIM_THRESHOLD = 1 << 30
#: Cold calls timed per calibration cell (per pass; in interleaved rounds, at most one a round), each
#: after the ranks read the eviction buffer.
COLD_CALLS = 8
_DEFAULT_LLC = 32 << 20
RELEASED_MEMORY = ("released: the C library's default (freed blocks of 128 KiB and more go back to the kernel; "
                   "glibc raises that threshold to the largest block freed, up to 32 MiB)")


def parse_bytes(text: str) -> int:
    """``"4"``, ``"64KiB"``, ``"256M"`` -> bytes (K, M, G are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise UserError(f"A size must be a whole number with an optional unit B, K/KiB, M/MiB or G/GiB. "
                        f"Received: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes`` (both included), each ``factor`` times the last."""
    if min_bytes < _ITEMSIZE or min_bytes % _ITEMSIZE or max_bytes < min_bytes:
        raise UserError(f"Message sizes must be multiples of {_ITEMSIZE} bytes (float32) with min <= max. "
                        f"Received: min={min_bytes}, max={max_bytes}")
    if factor < 2:
        raise UserError(f"The size factor must be at least 2. Received: {factor}")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes - max_bytes % _ITEMSIZE)
    return sizes


def parse_algorithms(text: str) -> list[str]:
    """Comma-separated algorithm names, checked against :data:`~deep500lite.lv3.allreduce.ALGORITHMS`."""
    names = [a.strip() for a in str(text).split(",") if a.strip()]
    bad = [a for a in names if a not in ALGORITHMS]
    if not names or bad:
        raise UserError(f"Unknown allreduce algorithm(s). Allowed values are {format_choices(ALGORITHMS)}. "
                        f"Received: {text!r}")
    return names


def calibration_sizes(sizes, factor: int | None = None) -> list[int]:
    """Sizes for the calibration run of a benchmark over ``sizes``.

    :data:`~deep500lite.perfmodel.allreduce.CALIBRATION_SIZES` up to twice the largest benchmark size;
    when that leaves fewer than three, the largest size and its 1/8 and 1/64 (multiples of 4).
    With ``factor`` (at least 2): from 16 KiB, or the smallest benchmark size if smaller, up to the
    largest, each ``factor`` times the last (``factor=2``: every power of two), and the largest.
    """
    from deep500lite.perfmodel.allreduce import CALIBRATION_SIZES

    top = max(int(s) for s in sizes)
    if factor is not None:
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
            raise UserError(f"The calibration size factor must be a whole number >= 2. Received: {factor!r}")
        return message_sizes(max(_ITEMSIZE, min(16 << 10, min(int(s) for s in sizes)) // _ITEMSIZE * _ITEMSIZE),
                             top, factor)
    chosen = [s for s in CALIBRATION_SIZES if s <= 2 * top]
    if len(chosen) >= 3:
        return chosen
    return sorted({max(4, (top // d) // _ITEMSIZE * _ITEMSIZE) for d in (64, 8, 1)})


def keep_freed_memory() -> str:
    """Make this process's C allocator keep the memory it frees instead of giving it back to the kernel.

    Every allreduce returns a fresh result array. By default glibc maps a block of 128 KiB or more
    on its own and unmaps it when it is freed (the threshold rises to the largest block freed, up to
    32 MiB, so blocks larger than 32 MiB always go back), and a size timed again after a pause
    touches fresh pages. On a VM whose balloon reports free pages to its host, that made 64 MiB
    calls on 4 ranks take 135-376 ms instead of 60-77 ms after one-second pauses (docs/scaling.md,
    "Three regimes"). A training loop that calls back to back reuses its blocks anyway. This sets glibc's
    ``M_MMAP_MAX`` to 0 and ``M_TRIM_THRESHOLD`` to 1 GiB (``mallopt``), the same as the
    environment variables ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824``.

    Returns:
        What the allocator does now, in words: kept, or :data:`RELEASED_MEMORY` with the reason
        where the C library has no working ``mallopt`` (not glibc).
    """
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return f"{RELEASED_MEMORY}; not kept: this C library is not glibc ({platform.libc_ver()[0] or 'unknown'})"
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(_M_MMAP_MAX, 0) != 1 or mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) != 1:
        return f"{RELEASED_MEMORY}; not kept: glibc's mallopt refused the settings"
    return "kept: freed memory stays in each rank (glibc mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD=1 GiB)"


def last_level_cache_bytes() -> int:
    """The size of this machine's largest CPU cache (Linux sysfs, cpu0), or 32 MiB where it cannot be read."""
    root, sizes = "/sys/devices/system/cpu/cpu0/cache", []
    for index in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        try:
            with open(os.path.join(root, index, "size")) as f:
                sizes.append(parse_bytes(f.read().strip()))
        except (OSError, UserError):
            continue
    return max(sizes, default=_DEFAULT_LLC)


def bus_factor(p: int) -> float:
    """nccl-tests' allreduce bus-bandwidth factor ``2 (p-1) / p``."""
    return 2 * (p - 1) / p


@dataclasses.dataclass
class AllreduceBenchmark:
    """Results of one ``bench allreduce`` run.

    Attributes:
        ranks: the number of ranks.
        model: the ping-pong ``{"alpha", "beta", "gamma"}`` (seconds, seconds per byte).
        rows: one dict per (size, algorithm): ``bytes``, ``algorithm``, ``chosen`` (what auto
            ran), ``samples`` (seconds, the slowest rank's per call), ``predicted`` (the ping-pong
            alpha-beta model's seconds, or None), ``calibrated`` (the fitted model's seconds, or
            None), ``wrong`` (elements that differ from the exact sum, over all ranks and the
            checked calls), ``bytes_sent`` (rank 0's per call), ``pass_medians`` (the median of
            each pass, with ``passes > 1``; absent in files of older versions).
        mpi_library: the MPI library's version line.
        calibration: the fitted model's :meth:`~deep500lite.perfmodel.allreduce.CalibratedModel.to_dict`
            (None when the run had none).
        rounds: with ``interleave``, the number of interleaved rounds (0: each row timed in one
            stretch); each row's ``pass_medians`` then holds the medians of the first, second and
            last third of the rounds.
        auto_model: with ``interleave`` and a calibration, the first fit (to the calibration
            cells' pilot calls) by which ``auto`` chose in the rounds, as ``calibration`` is
            written (None otherwise).
        allocator: what the ranks' C allocator did with freed memory, in words
            (:func:`keep_freed_memory`; '' in files of older versions, whose ranks released it).
    """

    ranks: int
    model: dict
    rows: list
    mpi_library: str = ""
    calibration: dict | None = None
    rounds: int = 0
    auto_model: dict | None = None
    allocator: str = ""

    def summaries(self):
        """``(row, Summary, algbw, busbw)`` for every row (bandwidths in bytes per second).

        With several passes the Summary's median is the median of the passes' medians and its
        interval their range (min, max) instead of the 95% CI of the pooled calls (its
        ``ci_coverage`` is then None). Interleaved rounds time every row alike in every round, so
        their calls are pooled as they are.
        """
        from deep500lite.metrics.statistics import summarize

        out = []
        for row in self.rows:
            s = summarize(row["samples"])
            medians = row.get("pass_medians") or []
            if len(medians) > 1 and not self.rounds:
                # passes take different numbers of calls (the faster, more): the median of the passes'
                # medians, with their range, weighs each pass alike, as the calibration's fit does
                s = dataclasses.replace(s, median=float(np.median(medians)), ci_low=float(min(medians)),
                                        ci_high=float(max(medians)), ci_coverage=None)
            algbw = row["bytes"] / s.median if s.median > 0 else float("nan")
            out.append((row, s, algbw, algbw * bus_factor(self.ranks)))
        return out

    def table(self, fmt: str = "table") -> str:
        """The results as text: one line per size and algorithm."""
        from deep500lite.metrics.tables import format_ci, format_seconds, format_table

        headers = ["size", "algorithm", "time median [95% CI]", "algbw GB/s", "busbw GB/s", "alpha-beta model",
                   "calibrated model", "error", "#wrong"]
        drift = self.passes() > 1
        if drift and self.rounds:
            headers.insert(3, "between thirds")
        elif drift:
            headers[2] = "time: median of passes [range]"
            headers.insert(3, "between passes")
        rows = []
        for row, s, algbw, busbw in self.summaries():
            name = row["algorithm"] if row["algorithm"] != "auto" else f"auto->{row['chosen']}"
            pred = "-" if row["predicted"] is None else format_seconds(row["predicted"])
            cal = row.get("calibrated")
            err = "-" if cal is None or not s.median > 0 else f"{(cal / s.median - 1) * 100:+.1f}%"
            cells = [_format_bytes(row["bytes"]), name, format_ci(s.median, s.ci_low, s.ci_high),
                     f"{algbw / 1e9:.3f}", f"{busbw / 1e9:.3f}", pred,
                     "-" if cal is None else format_seconds(cal), err, row["wrong"]]
            if drift:
                spread = pass_spread(row)
                cells.insert(3, "-" if spread is None else f"{spread * 100:.0f}%")
            rows.append(cells)
        return format_table(headers, rows, fmt)

    def passes(self) -> int:
        """How many passes the rows pooled (1 for results without ``pass_medians``)."""
        return max((len(r.get("pass_medians") or [0]) for r in self.rows), default=1)

    def summary(self, tolerance: float = 0.2) -> list:
        """Lines that judge the calibrated model: rows within ``tolerance`` of the measured median, the
        worst rows, and (with several passes) how far the machine's own medians moved between passes."""
        errs = [(n, a, e) for n, a, e in self.errors() if a != "auto"]
        lines = []
        span = self.calibrated_span()
        fitted, outside = [], []
        for t in errs:
            (outside if span and not span[0] <= t[0] <= span[1] else fitted).append(t)
        errs = fitted
        where = f" at the calibrated sizes ({_format_bytes(span[0])} to {_format_bytes(span[1])})" if outside else ""
        if errs:
            inside = sum(abs(e) <= tolerance for _, _, e in errs)
            worst = sorted(errs, key=lambda t: -abs(t[2]))[:5]
            lines.append(f"calibrated model within {tolerance:.0%} of the measured median: {inside} of {len(errs)} "
                         f"rows (point-to-point algorithms){where}; largest errors: "
                         + ", ".join(f"{a} {_format_bytes(n)} {e * 100:+.0f}%" for n, a, e in worst))
        if outside:
            inside = sum(abs(e) <= tolerance for _, _, e in outside)
            sizes = sorted({n for n, _, _ in outside})
            lines.append(f"beyond the calibrated sizes ({', '.join(map(_format_bytes, sizes))}) the model "
                         f"extrapolates: {inside} of {len(outside)} rows within {tolerance:.0%}; calibrate there "
                         f"with --calibration-factor")
        spreads = [(r["bytes"], r["algorithm"], pass_spread(r)) for r in self.rows if pass_spread(r) is not None]
        if spreads:
            values = np.array([sp for _, _, sp in spreads])
            n, a, top = max(spreads, key=lambda t: t[2])
            wide = int(np.sum(values > tolerance))
            where = f"the {self.passes()} passes"
            if self.rounds:
                where = f"the thirds of the {self.rounds} interleaved rounds"
            lines.append(f"between {where} a row's median moved by {np.median(values) * 100:.0f}% "
                         f"(median over rows), up to {top * 100:.0f}% ({a} {_format_bytes(n)}); {wide} of "
                         f"{len(values)} rows moved by more than {tolerance:.0%}: the machine's own repeatability")
        return lines

    def calibrated_span(self) -> tuple[int, int] | None:
        """The smallest and largest message size (bytes) the model was fitted to on this rank count,
        or None (no calibration, or a file without its measurements)."""
        points = ((self.calibration or {}).get("measurements") or {}).get(str(self.ranks)) or []
        sizes = [int(p[1]) for p in points]
        return (min(sizes), max(sizes)) if sizes else None

    def describe_model(self) -> str:
        """One line with the calibrated alpha, beta (as bandwidth) and gamma."""
        m = self.model
        bw = 1 / m["beta"] / 1e9 if m["beta"] > 0 else float("inf")
        red = 1 / m["gamma"] / 1e9 if m["gamma"] > 0 else float("inf")
        return (f"alpha-beta model on {self.ranks} ranks: alpha = {m['alpha'] * 1e6:.2f} us, "
                f"beta = {m['beta'] * 1e9:.4f} ns/B ({bw:.2f} GB/s), gamma = {m['gamma'] * 1e9:.4f} ns/B "
                f"({red:.2f} GB/s reduction)")

    def describe_calibration(self) -> str:
        """One line with the fitted model's parameters for this rank count ('' without one)."""
        if not self.calibration:
            return ""
        c = self.calibration["parameters"].get(str(self.ranks))
        if c is None:
            return ""
        mem = ""

        def costs(suffix):
            return (f"beta = {c['beta' + suffix] * 1e9:.4f}, gamma = {c['gamma' + suffix] * 1e9:.4f}, "
                    f"delta = {c['delta' + suffix] * 1e9:.4f} ns/B")
        regimes = [("in cache", "")]
        if c.get("cache_bytes") and c.get("memory_bytes"):
            mem = (f"; past the first cache (half of the traffic at {_format_bytes(int(c['cache_bytes']))}, "
                   f"crossover exponent {c.get('sharpness', 1.0):g}): {costs('_mid')}; beyond the caches (half of "
                   f"the traffic at {_format_bytes(int(c['memory_bytes']))}): {costs('_mem')}")
            regimes += [("past the first cache", "_mid"), ("beyond the caches", "_mem")]
        elif c.get("cache_bytes"):
            sharp = c.get("sharpness", 1.0)
            sharp = f", crossover exponent {sharp:g}" if sharp != 1.0 else ""
            mem = (f"; beyond the caches (half of the traffic at {_format_bytes(int(c['cache_bytes']))}{sharp}): "
                   f"{costs('_mem')}")
            regimes += [("beyond the caches", "_mem")]
        if any(c.get(f"{k}_avg{suffix}") for k in ("beta", "gamma") for _, suffix in regimes):
            mem += "; on the bytes averaged over the ranks: " + "; ".join(
                f"{name} beta = {c.get('beta_avg' + suffix, 0.0) * 1e9:.4f}, gamma = "
                f"{c.get('gamma_avg' + suffix, 0.0) * 1e9:.4f} ns/B" for name, suffix in regimes)
        cold = (self.calibration.get("cold") or {}).get(str(self.ranks))
        if cold:
            mem += (f"; a cold call (after each rank read {_format_bytes(cold['evict_bytes'])}) adds "
                    f"{c.get('cold_overhead', 0.0) * 1e6:.2f} us + {c.get('cold_per_byte', 0.0) * 1e9:.4f} ns/B")
        return (f"calibrated model on {self.ranks} ranks (fitted to the real algorithms): overhead = "
                f"{c['overhead'] * 1e6:.2f} us, alpha = {c['alpha'] * 1e6:.2f} us/message, beta = "
                f"{c['beta'] * 1e9:.4f} ns/B, gamma = {c['gamma'] * 1e9:.4f} ns/B, delta (copy) = "
                f"{c['delta'] * 1e9:.4f} ns/B" + mem)

    def errors(self, low: int = 0, high: int | None = None) -> list:
        """``(bytes, algorithm, relative error)`` of the calibrated model per row within ``[low, high]`` bytes."""
        out = []
        for row, s, _, _ in self.summaries():
            if row.get("calibrated") is None or row["bytes"] < low or (high is not None and row["bytes"] > high):
                continue
            out.append((row["bytes"], row["algorithm"], row["calibrated"] / s.median - 1.0))
        return out

    def total_wrong(self) -> int:
        """Elements that differed from the exact sum, over every row."""
        return sum(r["wrong"] for r in self.rows)

    def to_dict(self) -> dict:
        """JSON-ready results with every raw sample and the summaries."""
        rows = []
        for row, s, algbw, busbw in self.summaries():
            rows.append(dict(row, summary=s.to_dict(), algbw=algbw, busbw=busbw))
        return {"benchmark": "allreduce", "ranks": self.ranks, "model": self.model,
                "calibration": self.calibration, "rounds": self.rounds, "auto_model": self.auto_model,
                "mpi_library": self.mpi_library, "allocator": self.allocator,
                "bandwidth": "nccl-tests: algbw = S/t, busbw = algbw*2(p-1)/p", "rows": rows}


    @classmethod
    def from_dict(cls, data: dict) -> "AllreduceBenchmark":
        """Rebuild the results from :meth:`to_dict`'s JSON (``bench allreduce --json``)."""
        keys = ("bytes", "algorithm", "chosen", "samples", "predicted", "wrong", "bytes_sent")
        try:
            rows = [dict({k: row[k] for k in keys}, calibrated=row.get("calibrated"),
                         **({"pass_medians": row["pass_medians"]} if row.get("pass_medians") else {}))
                    for row in data["rows"]]
            return cls(ranks=int(data["ranks"]), model=dict(data["model"]), rows=rows,
                       mpi_library=data.get("mpi_library", ""), calibration=data.get("calibration"),
                       rounds=int(data.get("rounds") or 0), auto_model=data.get("auto_model"),
                       allocator=str(data.get("allocator") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            got = format_choices(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__
            raise UserError(f"Not the JSON of 'deep500lite bench allreduce --json': missing {exc}; give the output "
                            f"of that command. Received: {got}") from None

    def plot(self, path) -> str:
        """Write a PNG: per algorithm, the median time (95% CI bars) and the alpha-beta prediction
        (dashed) against the message size, and the bus bandwidth. Needs matplotlib.

        Returns:
            ``path``.
        """
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        from deep500lite.utils import atomic_write_bytes

        fig = Figure(figsize=(11, 4.4))
        FigureCanvasAgg(fig)
        ax_t, ax_bw = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        summaries = self.summaries()
        names = list(dict.fromkeys(row["algorithm"] for row, *_ in summaries))
        colors = dict(zip(names, ["#222222", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]))
        for name in names:
            part = [(row, s, busbw) for row, s, _, busbw in summaries if row["algorithm"] == name]
            x = [row["bytes"] for row, _, _ in part]
            med = np.array([s.median for _, s, _ in part])
            err = np.array([[s.median - s.ci_low for _, s, _ in part], [s.ci_high - s.median for _, s, _ in part]])
            label = name if name != "auto" else "auto (chosen by the model)"
            ax_t.errorbar(x, med, yerr=err, color=colors[name], marker="o", markersize=3, linewidth=1.2,
                          capsize=2, label=label)
            predicted = [(row["bytes"], row.get("calibrated") if row.get("calibrated") is not None
                          else row["predicted"]) for row, _, _ in part if row["predicted"] is not None]
            if predicted and name != "auto":
                ax_t.plot(*zip(*predicted), color=colors[name], linestyle="--", linewidth=0.9)
            ax_bw.plot(x, [b / 1e9 for _, _, b in part], color=colors[name], marker="o", markersize=3, label=label)
        for ax in (ax_t, ax_bw):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.grid(True, which="major", linewidth=0.3)
        ax_t.set_yscale("log")
        ax_t.set_ylabel("time per allreduce (s)")
        ax_t.set_title(f"{self.ranks} ranks: median [95% CI]; dashed: calibrated model", fontsize=9)
        ax_bw.set_ylabel("busbw (GB/s) = S/t * 2(p-1)/p")
        m = self.model
        ax_bw.set_title(f"bus bandwidth; model: alpha = {m['alpha'] * 1e6:.3g} us, 1/beta = "
                        f"{1e-9 / m['beta'] if m['beta'] > 0 else float('inf'):.3g} GB/s", fontsize=9)
        ax_t.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        atomic_write_bytes(path, buf.getvalue())
        return os.fspath(path)


def pass_spread(row: dict) -> float | None:
    """``max / min - 1`` of a row's per-pass medians (None with fewer than two passes)."""
    medians = [m for m in row.get("pass_medians") or [] if m > 0]
    if len(medians) < 2:
        return None
    return max(medians) / min(medians) - 1.0


def _format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def run_allreduce_benchmark(ranks: int, sizes, algorithms=DEFAULT_ALGORITHMS, max_time: float = 0.5,
                            comm_timeout: float = 120.0, mpiexec: str | None = None,
                            progress: bool = True, job_timeout: float | None = None, model_file=None,
                            save_model=None, calibrate: bool = True, passes: int = 1,
                            interleave: int = 0, calibration_factor: int | None = None,
                            keep_memory: bool = True, evict_bytes: int | None = None,
                            hosts=None) -> AllreduceBenchmark:
    """Launch the MPI job on ``ranks`` ranks and return its results.

    Args:
        ranks: number of MPI ranks (at least 2).
        sizes: message sizes in bytes (multiples of 4).
        algorithms: names from :data:`~deep500lite.lv3.allreduce.ALGORITHMS`.
        max_time: seconds of timed calls per size and algorithm, roughly (at least 3 calls).
        comm_timeout: seconds any single wait may last in the job before it is ended with an
            error naming the stalled rank.
        mpiexec: the launcher (default :func:`find_mpiexec`).
        progress: let rank 0 print one line per size to stderr.
        job_timeout: seconds after which the whole job is killed (None: no limit).
        model_file: a calibration file to use instead of calibrating (must hold ``ranks``).
        save_model: write the fitted model here (merged with the file's other rank counts).
        calibrate: run the short calibration of the real algorithms (False and no ``model_file``:
            no calibrated predictions; ``auto`` then uses the ping-pong model).
        passes: run the calibration and the measurement this many times, alternating (calibration,
            measurement, calibration, ...): the model is fitted to the median of the calibration
            passes, each row pools its samples over the passes and keeps each pass's median
            (``pass_medians``), which shows how much the machine itself drifts between passes.
        interleave: 0, or a number of rounds (at least 3): every calibration size and every row
            is timed once per round, in an order shuffled anew each round, for
            ``max_time / interleave`` seconds, so that the calibration and the rows it predicts
            see the same machine even when its speed drifts; ``auto`` is timed in the rounds too,
            choosing by a first fit to the calibration cells' pilot calls (``auto_model``). A
            cell whose one call is longer than ``max_time / interleave`` is timed every few
            rounds instead (at most ``interleave // 3`` apart). Not combined with ``passes``.
            (``deep500lite bench allreduce`` runs 48 rounds unless given ``--passes``.)
        calibration_factor: None (the default sizes of :func:`calibration_sizes`), or the factor
            between consecutive calibration sizes (2: every power of two from 16 KiB to the
            largest size).
        keep_memory: each rank keeps the memory it frees (:func:`keep_freed_memory`) instead of
            giving it back to the kernel, so that a size timed again after a pause does not
            touch fresh pages; False leaves the C library's default.
        evict_bytes: while calibrating, also time :data:`COLD_CALLS` cold calls of every calibration
            cell (per pass; with ``interleave``, spread over the rounds, at most one a round), each
            after every rank has read this many bytes, and fit what a cold call adds
            (:func:`~deep500lite.perfmodel.allreduce.fit_cold`): the first allreduce of a training step
            follows compute that filled the caches. None: the last-level cache
            (:func:`last_level_cache_bytes`); 0: no cold calls.
        hosts: the :class:`~deep500lite.lv3.hosts.Hosts` to start the ranks on (None: this
            machine). The job's configuration and results then go through a temporary folder
            in the working directory, which every host must see (a shared file system).
    """
    if evict_bytes is None:
        evict_bytes = last_level_cache_bytes()
    if isinstance(evict_bytes, bool) or not isinstance(evict_bytes, int) or evict_bytes < 0:
        raise UserError(f"evict_bytes must be a whole number of bytes >= 0 (0: no cold calls). Received: "
                        f"{evict_bytes!r}")
    if not isinstance(ranks, int) or ranks < 2:
        raise UserError(f"bench allreduce needs at least 2 ranks (-n). Received: {ranks!r}")
    if not max_time > 0:
        raise UserError(f"--max-time must be a positive number of seconds. Received: {max_time!r}")
    if not isinstance(passes, int) or isinstance(passes, bool) or passes < 1:
        raise UserError(f"passes must be a whole number >= 1. Received: {passes!r}")
    if isinstance(interleave, bool) or not isinstance(interleave, int) or (interleave != 0 and interleave < 3):
        raise UserError(f"interleave must be 0 (off) or a whole number of rounds >= 3. Received: {interleave!r}")
    if interleave and passes > 1:
        raise UserError(f"interleaved rounds replace passes; give one or the other. Received: interleave="
                        f"{interleave}, passes={passes}")
    sizes = [int(s) for s in sizes]
    if any(s < _ITEMSIZE or s % _ITEMSIZE for s in sizes):
        raise UserError(f"Message sizes must be positive multiples of {_ITEMSIZE} bytes. Received: {sizes}")
    cal_sizes = calibration_sizes(sizes, calibration_factor)
    algorithms = parse_algorithms(",".join(algorithms))
    if model_file is not None:
        from deep500lite.perfmodel.allreduce import CalibratedModel

        CalibratedModel.load(model_file).params(ranks)
        model_file = os.path.abspath(model_file)
    launcher = find_mpiexec(mpiexec, "bench allreduce")
    with tempfile.TemporaryDirectory(prefix="d5-allreduce-", dir=None if hosts is None else os.getcwd()) as tmp:
        config = {"sizes": sizes, "algorithms": algorithms, "max_time": max_time, "timeout": comm_timeout,
                  "progress": progress, "output": os.path.join(tmp, "result.json"), "model_file": model_file,
                  "calibrate": bool(calibrate), "calibration_sizes": cal_sizes, "passes": passes,
                  "rounds": interleave, "keep_memory": bool(keep_memory), "evict_bytes": evict_bytes,
                  "save_model": None if save_model is None else os.path.abspath(save_model)}
        config_path = os.path.join(tmp, "config.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        cmd = [launcher, *launcher_args(hosts), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m",
               "deep500lite.bench.allreduce_worker", config_path]
        rc = run_job(cmd, timeout=job_timeout, hosts=hosts)
        if rc != 0 or not os.path.exists(config["output"]):
            raise UserError("the allreduce benchmark job failed; its ranks' errors are printed above (a job that "
                            f"works exits with status 0 and writes its results). Received: exit status {rc} from "
                            f"{' '.join(cmd)}")
        with open(config["output"]) as f:
            data = json.load(f)
    return AllreduceBenchmark(ranks=data["ranks"], model=data["model"], rows=data["rows"],
                              mpi_library=data["mpi_library"], calibration=data.get("calibration"),
                              rounds=interleave, auto_model=data.get("auto_model"), allocator=data["allocator"])
