"""Records every wait of deep500lite's MPI communicator on each rank (measurement aid, not part of deep500lite).

On a rank (PMI_RANK set) it wraps MPICommunicator._wait once deep500lite.lv3.mpi is imported and, at exit,
writes one JSON list per rank to $D5X_WAITS_DIR/waits-RANK.json: for each wait its name, wall start and end
(perf_counter), the thread's CPU time before and after, and the voluntary and involuntary context switches
(getrusage) before and after.
"""
import builtins
import json
import os
import resource
import sys
import time

if os.environ.get("PMI_RANK") is not None and os.environ.get("D5X_WAITS_DIR"):
    _records, _state = [], {"patched": False}

    def _patch(mod):
        original = mod.MPICommunicator._wait

        def _wait(self, reqs, peers, what, statuses=None):
            r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time(), time.perf_counter()
            original(self, reqs, peers, what, statuses)
            t1, c1, r1 = time.perf_counter(), time.thread_time(), resource.getrusage(resource.RUSAGE_SELF)
            _records.append((what, t0, t1, c0, c1, r0.ru_nvcsw, r0.ru_nivcsw, r1.ru_nvcsw, r1.ru_nivcsw))
        mod.MPICommunicator._wait = _wait

    _import = builtins.__import__

    def _hook(name, *args, **kwargs):
        result = _import(name, *args, **kwargs)
        mod = sys.modules.get("deep500lite.lv3.mpi")
        if not _state["patched"] and mod is not None and hasattr(mod, "MPICommunicator"):
            _state["patched"] = True
            _patch(mod)
        return result
    builtins.__import__ = _hook

    def _dump():
        path = os.path.join(os.environ["D5X_WAITS_DIR"], f"waits-{os.environ['PMI_RANK']}.json")
        with open(path, "w") as f:
            json.dump(_records, f)
    import atexit
    atexit.register(_dump)
