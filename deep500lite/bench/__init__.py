"""Benchmarks run by ``deep500lite bench ...`` (speed targets live here, never in timed tests)."""
