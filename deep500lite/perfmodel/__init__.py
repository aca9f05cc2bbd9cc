"""Performance models: what a measurement should take, computed from a few machine parameters.

One module per model: :mod:`~deep500lite.perfmodel.alphabeta` (the alpha-beta model of the allreduce
algorithms, used by ``algorithm="auto"``), :mod:`~deep500lite.perfmodel.allreduce` (the calibrated
allreduce cost model fitted to the real algorithms, ``bench allreduce --save-model``),
:mod:`~deep500lite.perfmodel.peak` (the measured peak and the roofline), :mod:`~deep500lite.perfmodel.layers`
(each layer timed alone, ``model layers``), :mod:`~deep500lite.perfmodel.scaling` with
:mod:`~deep500lite.perfmodel.scaling_networks` and :mod:`~deep500lite.perfmodel.scaling_parallel`
(data-, pipeline-, spatial- and tensor-parallel training, ``model scaling``), and
:mod:`~deep500lite.perfmodel.checks` (runs beside predictions, ``model scaling --check``).

The package sits below level 3 (``lv3`` imports its models; it never imports ``lv3``, ``bench``,
``recipe`` or the CLI), and the CLI's ``model`` command only parses and prints. The submodules are
imported by name; importing the package imports none of them.
"""

__all__ = ["alphabeta", "allreduce", "peak", "layers", "scaling", "scaling_networks", "scaling_parallel", "checks"]
