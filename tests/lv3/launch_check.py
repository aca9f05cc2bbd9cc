"""Run on every rank by test_launch.py, test_hosts.py and test_emulate.py:
``launch_check.py ok|raise|exit CODE|sleep|host|hang-before-mpi RANK [TOKEN]``."""

import os
import socket
import sys
import time

if sys.argv[1] == "hang-before-mpi" and os.environ.get("PMI_RANK") == sys.argv[2]:
    time.sleep(120)  # never reaches MPI initialisation within any test's start-up timeout

from mpi4py import MPI  # noqa: E402 - after the planned hang

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
if mode == "host":
    print(f"rank {rank} runs on {socket.gethostname()} ({MPI.Get_processor_name()})", flush=True)
comm.Barrier()  # a rank that raised never gets here: without the abort, the others would wait forever
print(f"rank {rank} finished", flush=True)
