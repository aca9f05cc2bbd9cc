"""Benchmarks run by ``deep500lite bench ...`` (speed targets live here, never in timed tests).

One module per command: :mod:`~deep500lite.bench.op` (``bench op``; its cases in
:mod:`~deep500lite.bench.op_cases`, its plots in :mod:`~deep500lite.bench.op_plots`) with the measured
peak and roofline in :mod:`~deep500lite.perfmodel.peak`, :mod:`~deep500lite.bench.overhead` (``bench overhead``),
:mod:`~deep500lite.bench.op_overhead` (``bench overhead --op``), :mod:`~deep500lite.bench.dataset`
(``bench dataset``) and :mod:`~deep500lite.bench.allreduce` (``bench allreduce``; its MPI job in
:mod:`~deep500lite.bench.allreduce_worker`). They hold the
framework-neutral part (cases, timing, statistics, tables, JSON); what is called on each framework
is in that framework's ``bench`` module (``frameworks/<fw>/bench.py``, or a plugin's), which
implements :mod:`deep500lite.bench.contract` (the only module of this package it imports) and is
loaded at run time through the framework's spec (``spec.role("bench")``).
"""

__all__ = ["contract", "op", "op_cases", "op_plots", "overhead", "op_overhead", "dataset", "allreduce",
           "allreduce_worker", "zoo", "targets"]
