"""Benchmarks run by ``deep500lite bench ...`` (speed targets live here, never in timed tests).

One module per command: :mod:`~deep500lite.bench.op` (``bench op``) with the measured peak and
roofline in :mod:`~deep500lite.perfmodel.peak`, :mod:`~deep500lite.bench.overhead` (``bench overhead``),
:mod:`~deep500lite.bench.op_overhead` (``bench overhead --op``), :mod:`~deep500lite.bench.dataset`
(``bench dataset``) and :mod:`~deep500lite.bench.allreduce` (``bench allreduce``). They hold the
framework-neutral part (cases, timing, statistics, tables, JSON); what is called on each framework
is in that framework's ``bench`` module (``frameworks/<fw>/bench.py``), loaded at run time with
:func:`deep500lite.registry.framework_module`.
"""

__all__ = ["op", "peak", "overhead", "op_overhead", "dataset", "allreduce"]
