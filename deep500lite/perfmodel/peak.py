"""This machine's measured peak compute and memory bandwidth, and the roofline model.

The peak figures are *measured*, not read from a data sheet, so that "% of peak" compares an
operator with what this machine (its BLAS, its memory, its other load) actually delivers:

- **compute** (FLOP/s): a large float32 GEMM (``n x n`` times ``n x n``, ``2 n^3`` FLOP), in
  numpy (its BLAS) and in torch (MKL) when torch is installed, each with the given number of
  threads (default: the usable cores); the peak is the faster of the two, and both are reported.
  On a GPU: the same GEMM in torch on the device (float32, TF32 off, which is torch's default).
- **bandwidth** (bytes/s): STREAM-style kernels on arrays of 64 MiB each, larger than the
  caches: *copy* (``b = a``, 2 arrays moved) and *add* (``c = a + b``, 3 arrays moved), in
  numpy with as many Python threads as CPU threads, each on its own slice (numpy releases the
  GIL in these loops); the peak is the faster of the two. On a GPU: a torch ``copy_`` of 256 MiB.

Each kernel is timed with :func:`deep500lite.metrics.time_function` (one warm-up run, then at
least 5 runs, up to 0.6 s); the figure is work / the *fastest* run, since a peak is an upper bound
(on a shared machine the median would count other programs' interference against the machine).
:func:`measure_peak` caches its result per process, device and thread count; measured again
(``refresh=True``), each kernel keeps its faster measurement. ``bench op`` measures before and
after its cases.

Roofline (Williams, Waterman, Patterson, CACM 2009): an operator that performs ``F`` FLOP and
moves ``B`` bytes (its inputs read once and outputs written once) has arithmetic intensity
``I = F / B``. It cannot run faster than ``attainable = min(peak_flops, I * peak_bandwidth)``;
it is *memory-bound* when ``I`` is below the ridge point ``peak_flops / peak_bandwidth`` and
*compute-bound* otherwise.

The torch kernels are in ``frameworks/torch/bench.py`` (``peak_cpu_kernels``,
``peak_gpu_kernels``) of the frameworks whose spec lists ``"peak"`` in ``bench``, reached through the
registry when measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np

from deep500lite.errors import DeviceError, UserError
from deep500lite.registry import frameworks_with, spec

__all__ = ["Peak", "Roofline", "measure_peak", "measure_kernel", "roofline", "usable_cores", "require_torch_gpu",
           "blas_threads"]

_GEMM_N_CPU = 2048
_GEMM_N_GPU = 8192
_STREAM_ELEMENTS = 1 << 24  # float32: 64 MiB per array
_GPU_COPY_ELEMENTS = 1 << 26  # float32: 256 MiB


def usable_cores() -> int:
    """The number of CPU cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def blas_threads(threads: int):
    """Limit numpy's BLAS to ``threads`` threads inside the block (with threadpoolctl, when installed).

    Yields:
        A description of the BLAS threading, such as ``"openblas 2"``; without threadpoolctl the
        BLAS keeps its default (all cores, or ``OPENBLAS_NUM_THREADS``) and the text says so.
    """
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        yield "BLAS default threads (install threadpoolctl to set them)"
        return
    with threadpool_limits(limits=threads, user_api="blas"):
        found = sorted({f"{i.get('internal_api')} {i.get('num_threads')}" for i in threadpool_info()
                        if i.get("user_api") == "blas"})
        yield ", ".join(found) or "no BLAS found by threadpoolctl"


@dataclasses.dataclass(frozen=True)
class Peak:
    """Measured peak compute and bandwidth of one device.

    Attributes:
        device: ``"cpu"`` or ``"gpu:N"``.
        flops: peak compute in FLOP/s (the best of the GEMMs measured).
        bandwidth: peak memory bandwidth in bytes/s (the best of the kernels measured).
        flops_method: how ``flops`` was measured (which library, size, threads).
        bandwidth_method: how ``bandwidth`` was measured.
        kernels: every kernel measured: name -> ``{"rate", "median_rate", "unit", "work", "measurement"}``
            (``measurement`` is :meth:`Measurement.to_dict`, with every raw sample).
    """

    device: str
    flops: float
    bandwidth: float
    flops_method: str
    bandwidth_method: str
    kernels: dict

    @property
    def ridge(self) -> float:
        """The ridge point in FLOP/byte: intensities below it are memory-bound."""
        return self.flops / self.bandwidth

    def describe(self) -> str:
        """Two lines for the terminal: the peak figures and how they were measured."""
        return (f"peak compute:   {self.flops / 1e9:.1f} GFLOP/s ({self.flops_method})\n"
                f"peak bandwidth: {self.bandwidth / 1e9:.1f} GB/s ({self.bandwidth_method}); "
                f"ridge point {self.ridge:.1f} FLOP/byte")

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        return {"device": self.device, "flops": self.flops, "bandwidth": self.bandwidth, "ridge": self.ridge,
                "flops_method": self.flops_method, "bandwidth_method": self.bandwidth_method,
                "kernels": self.kernels}


@dataclasses.dataclass(frozen=True)
class Roofline:
    """Where one measured operator sits under the roofline of a :class:`Peak`.

    Attributes:
        achieved: FLOP/s achieved (FLOP / median time).
        intensity: arithmetic intensity in FLOP/byte.
        attainable: ``min(peak.flops, intensity * peak.bandwidth)`` in FLOP/s.
        bound: ``"memory"`` when ``intensity < peak.ridge``, else ``"compute"``.
        fraction_of_attainable: ``achieved / attainable``.
        fraction_of_peak: ``achieved / peak.flops``.
    """

    achieved: float
    intensity: float
    attainable: float
    bound: str
    fraction_of_attainable: float
    fraction_of_peak: float

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return dataclasses.asdict(self)


def roofline(flops: float, bytes_moved: float, seconds: float, peak: Peak) -> Roofline:
    """Place an operator that did ``flops`` FLOP moving ``bytes_moved`` bytes in ``seconds``.

    Args:
        flops: floating-point operations of one call.
        bytes_moved: bytes of one call's inputs and outputs, each counted once.
        seconds: the time of one call (the median).
        peak: the machine's :class:`Peak`.

    Returns:
        A :class:`Roofline`.
    """
    if flops <= 0 or bytes_moved <= 0 or seconds <= 0:
        raise UserError(f"roofline needs positive flops, bytes and time. Received: flops={flops}, "
                        f"bytes_moved={bytes_moved}, seconds={seconds}")
    achieved = flops / seconds
    intensity = flops / bytes_moved
    attainable = min(peak.flops, intensity * peak.bandwidth)
    bound = "memory" if intensity < peak.ridge else "compute"
    return Roofline(achieved, intensity, attainable, bound, achieved / attainable, achieved / peak.flops)


def measure_kernel(fn, work: float, unit: str, sync=None, max_time: float = 0.6) -> dict:
    """Time one peak kernel: one warm-up run, then at least 5 runs, up to ``max_time`` seconds.

    Args:
        fn: the kernel (a call).
        work: FLOP or bytes of one call.
        unit: ``"FLOP/s"`` or ``"B/s"``.
        sync: waits for the device's work (None on the CPU).
        max_time: seconds of timed work at most.

    Returns:
        ``{"rate": work / fastest run, "median_rate", "unit", "work", "measurement"}``.
    """
    from deep500lite.metrics.timing import time_function

    m = time_function(fn, sync=sync, warmup=1, min_runs=5, max_time=max_time)
    # A peak is an upper bound, so the fastest run counts; the median is kept for comparison.
    return {"rate": work / min(m.raw_times), "median_rate": work / m.median, "unit": unit, "work": work,
            "measurement": m.to_dict()}


def _cpu_gemms(threads: int) -> dict:
    rng = np.random.default_rng(0)
    n = _GEMM_N_CPU
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    work = 2.0 * n ** 3
    with blas_threads(threads):
        kernels = {"gemm_numpy": measure_kernel(lambda: np.matmul(a, b), work, "FLOP/s")}
    for name in frameworks_with(bench="peak", available=True):
        kernels.update(spec(name).role("bench").peak_cpu_kernels(a, b, threads))
    return kernels


def _cpu_streams(threads: int) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    count = _STREAM_ELEMENTS
    x = np.full(count, 1.0, dtype=np.float32)
    y = np.full(count, 2.0, dtype=np.float32)
    z = np.empty(count, dtype=np.float32)
    bounds = np.linspace(0, count, threads + 1).astype(int)
    slices = [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        def copy():
            list(pool.map(lambda s: np.copyto(z[s], x[s]), slices))

        def add():
            list(pool.map(lambda s: np.add(x[s], y[s], out=z[s]), slices))

        return {"stream_copy_numpy": measure_kernel(copy, 2.0 * x.nbytes, "B/s"),
                "stream_add_numpy": measure_kernel(add, 3.0 * x.nbytes, "B/s")}


def _best(kernels: dict) -> tuple[str, str]:
    """The fastest kernel's name and a list of all, as ``numpy 71.3, torch 67.9`` (in units of 1e9)."""
    best = max(kernels, key=lambda k: kernels[k]["rate"])
    listed = ", ".join(f"{k.split('_')[1]} {v['rate'] / 1e9:.1f}" for k, v in kernels.items())
    return best, listed


def _cpu_peak(threads: int, kernels: dict, measured: int) -> Peak:
    gemms = {k: v for k, v in kernels.items() if k.startswith("gemm_")}
    streams = {k: v for k, v in kernels.items() if k.startswith("stream_")}
    times = f"; best of {measured} measurements" if measured > 1 else ""
    best_gemm, listed = _best(gemms)
    n = _GEMM_N_CPU
    flops_method = (f"float32 GEMM {n}x{n}x{n}, {threads} threads, best of {listed} GFLOP/s: "
                    f"{best_gemm.split('_')[1]}{times}")
    best_stream, listed = _best(streams)
    bandwidth_method = (f"numpy STREAM on 64 MiB float32 arrays, {threads} threads, best of {listed} GB/s: "
                        f"{best_stream.split('_')[1]}{times}")
    return Peak("cpu", gemms[best_gemm]["rate"], streams[best_stream]["rate"], flops_method, bandwidth_method,
                kernels)


def _gpu_peak(index: int, kernels: dict, measured: int) -> Peak:
    info = _gpu_bench().gpu_info(index)
    name = info["name"]
    tf32 = "on" if info["tf32"] else "off"
    times = f"; best of {measured} measurements" if measured > 1 else ""
    n = _GEMM_N_GPU
    return Peak(f"gpu:{index}", kernels["gemm_torch"]["rate"], kernels["copy_torch"]["rate"],
                f"torch float32 GEMM {n}x{n}x{n} on {name} (TF32 {tf32}){times}",
                f"torch copy_ of {_GPU_COPY_ELEMENTS * 4 >> 20} MiB float32 on {name}{times}", kernels)


# (device, threads) -> (the fastest measurement of each kernel so far, how many times measured)
_MEASURED: dict[tuple[str, int], tuple[dict, int]] = {}


def measure_peak(device="cpu", threads: int | None = None, refresh: bool = False) -> Peak:
    """Measure this machine's peak compute and bandwidth (cached per process; about 2-3 s on CPU).

    Args:
        device: ``"cpu"``, ``"gpu:N"`` or a :class:`~deep500lite.Device`; a GPU needs torch with CUDA.
        threads: CPU threads to use (default: the usable cores).
        refresh: measure again even when cached, and keep each kernel's faster measurement (a peak
            is an upper bound; on a shared machine one measurement may fall in a busy moment).

    Returns:
        A :class:`Peak`.

    Raises:
        DeviceError: a GPU was asked for but torch cannot see it.
    """
    from deep500lite.lv1.device import as_device

    dev = as_device(device)
    if dev.is_gpu:
        require_torch_gpu(dev.index)
    threads = threads or usable_cores()
    key = (str(dev), threads)
    if key not in _MEASURED or refresh:
        new = (_gpu_bench().peak_gpu_kernels(dev.index, _GEMM_N_GPU, _GPU_COPY_ELEMENTS)
               if dev.is_gpu else {**_cpu_gemms(threads), **_cpu_streams(threads)})
        old, count = _MEASURED.get(key, ({}, 0))
        merged = {k: max((v, old[k]) if k in old else (v,), key=lambda e: e["rate"]) for k, v in new.items()}
        _MEASURED[key] = (merged, count + 1)
    kernels, count = _MEASURED[key]
    return _gpu_peak(dev.index, kernels, count) if dev.is_gpu else _cpu_peak(threads, kernels, count)


def _gpu_bench():
    """The ``bench`` module of the first installed framework that measures a GPU's peak (``peak`` and ``gpu``)."""
    names = frameworks_with(bench="peak", devices="gpu", available=True)
    if not names:
        wanted = frameworks_with(bench="peak", devices="gpu")
        raise DeviceError(f"Measuring a GPU needs a framework that measures its peak, with CUDA: "
                          f"{', '.join(spec(n).install for n in wanted) or 'none is registered'}. Use --device cpu. "
                          f"Received: none of {wanted} installed")
    return spec(names[0]).role("bench")


def require_torch_gpu(index: int) -> None:
    """Raise a :class:`~deep500lite.errors.DeviceError` unless the GPU-measuring framework sees CUDA GPU ``index``."""
    _gpu_bench().require_gpu(index)
