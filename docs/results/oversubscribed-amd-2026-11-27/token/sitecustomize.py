"""Makes a 1-rank recipe run take turns with another copy, one training step each (measurement aid).

With D5X_IN and D5X_OUT naming two FIFOs, the trainer reads one byte from D5X_IN before each step
("before_sampling") and writes one byte to D5X_OUT after it ("after_optimizer_step"). Two copies
joined crosswise on one core then alternate step by step, as two ranks sharing a core do, but wait
by blocking on a pipe instead of polling MPI.
"""
import builtins
import os
import sys

IN, OUT = os.environ.get("D5X_IN"), os.environ.get("D5X_OUT")
if IN and OUT:
    _state = {"patched": False, "in": None, "out": None}

    def _patch(mod):
        original = mod._call

        def _call(events, name, *args, **kwargs):
            if name == "before_sampling":
                if _state["in"] is None:
                    _state["in"] = open(IN, "rb", buffering=0)
                _state["in"].read(1)
            result = original(events, name, *args, **kwargs)
            if name == "after_optimizer_step":
                if _state["out"] is None:
                    _state["out"] = open(OUT, "wb", buffering=0)
                _state["out"].write(b"x")
            return result
        mod._call = _call

    _import = builtins.__import__

    def _hook(name, *args, **kwargs):
        result = _import(name, *args, **kwargs)
        mod = sys.modules.get("deep500lite.lv2.trainer")
        if not _state["patched"] and mod is not None and hasattr(mod, "_call") and hasattr(mod, "Trainer"):
            _state["patched"] = True
            _patch(mod)
        return result
    builtins.__import__ = _hook
