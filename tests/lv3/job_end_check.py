"""Run on every rank by test_job_end.py: ``job_end_check.py HOW WHEN RANK``.

Rank RANK ends as HOW says (``exit3``, ``exit0``, ``os_exit0``, ``raise``, ``segv``, ``kill9``) before
(WHEN ``before``) or after (``after``) MPI initialisation; every other rank initialises MPI and waits in a
barrier for it, as ranks of a real job wait for a peer. HOW ``sleep`` makes every rank sleep (for the
signal tests) after MPI initialisation.
"""

import ctypes
import os
import signal
import sys
import time

how, when, victim = sys.argv[1], sys.argv[2], int(sys.argv[3])
me = int(os.environ.get("PMI_RANK", "-1"))


def end() -> None:
    print(f"rank {me} ends: {how} {when} MPI initialisation", flush=True)
    if how == "exit3":
        sys.exit(3)
    if how == "exit0":
        sys.exit(0)
    if how == "os_exit0":
        os._exit(0)
    if how == "raise":
        raise RuntimeError(f"planned failure on rank {me}")
    if how == "segv":
        ctypes.string_at(0)  # a real segmentation fault: reads address 0
    if how == "kill9":
        os.kill(os.getpid(), signal.SIGKILL)


if me == victim and when == "before":
    end()

from mpi4py import MPI  # noqa: E402 - after the planned end before MPI initialisation

comm = MPI.COMM_WORLD
print(f"rank {comm.Get_rank()} of {comm.Get_size()} initialised MPI", flush=True)
if how == "sleep":
    time.sleep(300)
if me == victim:
    time.sleep(0.5)  # the others are in the barrier by now
    end()
comm.Barrier()  # the failed rank never gets here: the others would wait for it forever
print(f"rank {comm.Get_rank()} passed the barrier", flush=True)
