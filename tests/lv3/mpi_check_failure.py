"""Run under mpiexec by tests/lv3/test_mpi.py: a rank that fails or stalls must end the job.

Usage: ``mpi_check_failure.py raise`` (rank 1 raises while the others wait in an allreduce with
no timeout) or ``mpi_check_failure.py stall ALGORITHM`` (the last rank skips an allreduce; the
others have a 2-second timeout).
"""

import sys
import time

import numpy as np

from deep500lite.lv3.mpi import MPICommunicator


def main(mode, algorithm="native"):
    if mode == "raise":
        comm = MPICommunicator()
        comm.barrier()
        if comm.rank == 1:
            raise ValueError("boom from the test")
        comm.allreduce(np.ones(10), algorithm=algorithm)
    elif mode == "stall":
        comm = MPICommunicator(timeout=2.0)
        comm.barrier()
        if comm.rank == comm.size - 1:
            time.sleep(60)  # skips the collective
        else:
            comm.allreduce(np.ones(10), algorithm=algorithm)
    print(f"rank {comm.rank} finished without error", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
