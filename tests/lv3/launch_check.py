"""Run on every rank by test_launch.py: ``launch_check.py ok|raise|exit CODE|sleep``."""

import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1]
print(f"rank {rank} of {size} started with {sys.argv[1:]}", flush=True)
if mode == "raise" and rank == size - 1:
    raise RuntimeError(f"planned failure on rank {rank}")
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "sleep":
    time.sleep(60)
comm.Barrier()  # a rank that raised never gets here: without the abort, the others would wait forever
print(f"rank {rank} finished", flush=True)
