"""A level-3 communicator over ``torch.distributed`` (gloo on the CPU, NCCL on CUDA GPUs).

It lives in the torch framework package because ``torch.distributed`` is a torch feature. The
core never imports it statically: ``deep500lite.lv3.TorchDistributedCommunicator`` (also
``d5.distributed.TorchDistributedCommunicator``) imports this module on first access.

Arrays stay numpy arrays: they are handed to torch with ``torch.from_numpy`` (no copy, no
pickling) and, on a GPU, copied to the device and back. Ranks find each other through an
already initialized process group, torchrun's environment (``env://``), an ``mpiexec`` launch
(rank 0's address shared through mpi4py), or an explicit ``init_method``; see
:class:`TorchDistributedCommunicator`.

Also :class:`HorovodDistributedOptimizer`, the Horovod adapter over ``horovod.torch``.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import sys
import threading
import time

import numpy as np

from deep500lite.errors import FrameworkNotAvailableError, UserError, format_choices
from deep500lite.lv3 import _common
from deep500lite.lv3 import allreduce as _ar
from deep500lite.lv3.communication import CommunicationNetwork, CompletedRequest, Request
from deep500lite.lv3.horovod import HorovodOptimizerBase

__all__ = ["TorchDistributedCommunicator", "BACKENDS", "HorovodDistributedOptimizer"]

#: Values of ``backend=``.
BACKENDS = ("gloo", "nccl")
#: numpy dtypes the native reductions accept (gloo and NCCL reject unsigned integers wider than 8 bits).
_REDUCIBLE = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                         np.int64, np.uint8, np.complex64, np.complex128))
_TAG_RIGHT = 1
_TAG_LEFT = 2
_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_MPI_SIZE_ENV = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE")
_LOCAL_RANK_ENV = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")


def _import_dist():
    try:
        import torch
    except ImportError as exc:
        raise FrameworkNotAvailableError(
            "TorchDistributedCommunicator needs PyTorch: pip install 'deep500lite[torch]'") from exc
    import torch.distributed as dist
    if not dist.is_available():
        raise UserError("This PyTorch build has no torch.distributed (torch.distributed.is_available() is "
                        f"False). Install a build with distributed support. Received: torch {torch.__version__}")
    return torch, dist


def _mpi_launched() -> bool:
    """Whether this process is one of several ranks started by mpiexec (without importing mpi4py)."""
    for name in _MPI_SIZE_ENV:
        try:
            if int(os.environ.get(name, "1")) > 1:
                return True
        except ValueError:
            pass
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1


def _local_rank() -> int:
    for name in _LOCAL_RANK_ENV:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def _host_address(hosts: list[str]) -> str:
    """The address the other ranks use to reach rank 0 (``hosts``: every rank's host name)."""
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    if all(h == hosts[0] for h in hosts):
        return "127.0.0.1"
    try:
        address = socket.gethostbyname(hosts[0])
        if not address.startswith("127."):
            return address
    except OSError:
        pass
    return socket.getfqdn()


class _Staged:
    """A numpy array seen as a torch tensor on the communicator's device.

    On the CPU the tensor shares the array's memory (``torch.from_numpy``). On a GPU the array's
    data is copied to the device (``upload=True``) or an empty device tensor is made, and
    :meth:`download` copies the device tensor back into the array.
    """

    def __init__(self, comm: TorchDistributedCommunicator, array: np.ndarray, as_bytes: bool, upload: bool):
        torch = comm._torch
        self.array = array
        self.host = torch.from_numpy(array.reshape(-1).view(np.uint8) if as_bytes else array)
        if comm._on_cpu:
            self.tensor = self.host
        elif upload:
            self.tensor = self.host.to(comm.device)
        else:
            self.tensor = torch.empty_like(self.host, device=comm.device)

    def download(self) -> None:
        if self.tensor is not self.host:
            self.host.copy_(self.tensor)


def _failure(comm, what: str, exc: Exception) -> UserError:
    """The error for ``what`` that torch.distributed failed (not by a timeout) on ``comm``'s rank."""
    return UserError(f"rank {comm.rank} of {comm.size}: {what} failed in torch.distributed ({comm.backend}). "
                     "A rank that exited or raised, or a broken connection between the hosts, causes this: "
                     f"look for the first error in the ranks' output. Received: {exc}")


class _TorchRequest(Request):
    def __init__(self, owner: TorchDistributedCommunicator, work, staged: _Staged, peer: int, sending: bool,
                 what: str):
        super().__init__(owner, staged.array, peer, sending)
        self._work, self._staged, self._what = work, staged, what
        self._waiter = None
        self._error = None
        self._desc = (f"rank {peer} to receive {self.buffer.nbytes} bytes" if sending
                      else f"a message from rank {peer} ({self.buffer.nbytes} bytes)")

    def _complete(self) -> None:
        exc = self._error
        if exc is not None:
            owner = self.owner
            if not isinstance(exc, RuntimeError):
                raise exc
            if owner.timeout is not None and ("timed out" in str(exc).lower() or "timeout" in str(exc).lower()):
                raise _common.timeout_error(owner.rank, owner.size, self._what, owner.timeout, [self._desc]) from exc
            raise _failure(owner, self._what, exc) from exc
        if not self.sending:
            self._staged.download()

    def _wait_in_thread(self) -> None:
        try:
            self._work.wait()
        except Exception as exc:  # handed to the thread that asks
            self._error = exc

    def _poll(self) -> bool:
        if self.owner.backend == "nccl":
            done = self._work.is_completed()
        else:
            # gloo's send/recv works only report completion through wait(): a helper thread waits.
            if self._waiter is None:
                self._waiter = threading.Thread(target=self._wait_in_thread, daemon=True)
                self._waiter.start()
            done = not self._waiter.is_alive()
        if done:
            self._complete()
        return done

    def _block(self) -> None:
        owner = self.owner
        if self._waiter is None:
            owner._wait([self._work], [self._desc], self._what)
        else:
            self._waiter.join(owner.timeout)
            if self._waiter.is_alive():
                raise _common.timeout_error(owner.rank, owner.size, self._what, owner.timeout, [self._desc])
        self._complete()


class _TorchAllreduce(Request):
    """A native ``all_reduce(async_op=True)`` in flight; counted under ``allreduce`` (and divided, for
    ``mean``) once done."""

    def __init__(self, owner: TorchDistributedCommunicator, work, staged: _Staged, op: str):
        super().__init__(owner, staged.array, -1, False)
        self._work, self._staged, self._op = work, staged, op

    def _poll(self) -> bool:
        return self._work.is_completed()

    def _block(self) -> None:
        self.owner._collective(self._work, "iallreduce(native)")

    def _record(self) -> None:
        owner = self.owner
        self._staged.download()
        owner._count("allreduce", *_common.native_volume("allreduce", self.buffer.nbytes, owner.size, owner.rank))
        _common.finish_mean(self.buffer, self._op, owner.size)


class TorchDistributedCommunicator(_common.AlgorithmChoice, CommunicationNetwork):
    """A :class:`CommunicationNetwork` over ``torch.distributed``: gloo on the CPU, NCCL on CUDA.

    How the ranks find each other, in this order:

    1. ``torch.distributed`` is already initialized: its default group is used as it is (and left
       alone by :meth:`close`).
    2. ``init_method`` is given: ``init_process_group(backend, init_method, rank=rank,
       world_size=size)`` (``rank``/``size`` None read ``RANK``/``WORLD_SIZE``).
    3. ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` are set (torchrun): ``env://``.
    4. Launched by ``mpiexec`` with more than one rank (``PMI_SIZE``, ``OMPI_COMM_WORLD_SIZE``,
       ``MV2_COMM_WORLD_SIZE`` or ``PMIX_SIZE`` above 1, or mpi4py already initialized with
       several ranks): rank and size are MPI's; rank 0 opens a ``TCPStore`` on a free port
       chosen by the system and mpi4py broadcasts ``"host:port"`` (a short string) to the
       others. The host is ``127.0.0.1`` when all ranks share a host name, else ``MASTER_ADDR``
       or rank 0's resolved address. An uncaught exception then ends the whole job (as for
       :class:`~deep500lite.lv3.mpi.MPICommunicator`).
    5. Otherwise one process: ``size`` 1, ``rank`` 0 and no process group at all; collectives
       return copies, point-to-point calls are refused.

    Args:
        backend: ``gloo`` or ``nccl``; None chooses ``nccl`` for a CUDA ``device`` and ``gloo``
            otherwise.
        device: ``cpu`` (default), ``cuda``, ``cuda:N``, ``gpu`` or ``gpu:N`` (deep500lite's
            name for ``cuda:N``), or a ``torch.device``. Without an index, the GPU is
            ``local rank % GPUs`` (``LOCAL_RANK``, ``MPI_LOCALRANKID`` or
            ``OMPI_COMM_WORLD_LOCAL_RANK``). CUDA devices need ``backend='nccl'``.
        timeout: seconds any single wait may last before raising
            :class:`~deep500lite.lv3.communication.CommunicationTimeout` (naming this rank, the
            operation and the peer); None waits forever unless ``DEEP500LITE_COMM_TIMEOUT`` is
            set. It is also the process group's own timeout (rendezvous included). After a
            timeout the group is broken: end the job.
        init_method: a torch ``init_method`` URL (``tcp://host:port``, ``file:///path``, ``env://``).
        rank, size: this rank and the number of ranks, with ``init_method`` (or torchrun's
            ``MASTER_ADDR``/``MASTER_PORT``).
        cost_model: an :class:`~deep500lite.lv3.allreduce.AlphaBeta` for ``algorithm="auto"``;
            measured by :meth:`calibrate` at the first ``auto`` allreduce when None.

    Attributes:
        rank, size: this rank and the number of ranks.
        backend: ``gloo`` or ``nccl``.
        device: the ``torch.device`` the tensors live on during an operation.
        group: the process group of the user's operations (None when ``size`` is 1).
        timeout, cost_model: as above.

    Byte counting follows :class:`~deep500lite.lv3.mpi.MPICommunicator`: point-to-point
    operations and the allreduce algorithms count every message; the ``native`` collectives
    count the direct exchange (:func:`deep500lite.lv3._common.native_volume`).

    Creating a communicator with more than one rank is collective (it makes a second group, for
    the algorithms' messages). On a GPU every operation copies its arrays to the device and the
    results back, synchronously; tensors that already live on the GPU are better served by
    ``torch.distributed`` itself.

    NCCL has no receive from any rank (``recv_any`` needs gloo) and ignores tags: messages between
    two ranks are matched in the order they are posted.
    """

    def __init__(self, backend: str | None = None, device=None, timeout: float | None = None,
                 init_method: str | None = None, rank: int | None = None, size: int | None = None,
                 cost_model: _ar.AlphaBeta | None = None):
        super().__init__()
        torch, dist = _import_dist()
        self._torch, self._dist = torch, dist
        self.timeout = _common.resolve_timeout(timeout)
        self.device = self._parse_device(device)
        self._on_cpu = self.device.type == "cpu"
        self.backend = self._parse_backend(backend)
        self.cost_model = cost_model
        self._auto_choices: dict = {}
        self._owns_group = False
        self.group = self._p2p = None
        self._ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                     "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self._rendezvous(init_method, rank, size)
        if self.group is not None:
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
            # Algorithm and neighbour messages travel in their own group, so they never match
            # the user's own sends (like MPICommunicator's duplicated communicator).
            self._p2p = dist.new_group(backend=self.backend, timeout=self._pg_timeout())
            if self.backend == "nccl":  # NCCL wants every rank in a group's first call
                self._wait([dist.all_reduce(torch.zeros(1, device=self.device), group=self._p2p,
                                            async_op=True)], [], "communicator setup")

    # ------------------------------------------------------------ set-up
    def _parse_device(self, device):
        torch = self._torch
        if device is None:
            return torch.device("cpu")
        text = str(device).strip().lower()
        match = re.fullmatch(r"(cpu|cuda|gpu)(?::(\d+))?", text)
        if match is None or (match.group(1) == "cpu" and match.group(2)):
            raise UserError(f"Unknown device. Allowed values are 'cpu', 'cuda', 'cuda:N', 'gpu', 'gpu:N'. "
                            f"Received: device={device!r}")
        if match.group(1) == "cpu":
            return torch.device("cpu")
        if not torch.cuda.is_available():
            raise UserError(f"device={device!r} needs a CUDA GPU, and torch.cuda.is_available() is False "
                            f"(torch {torch.__version__}). Use device='cpu' (gloo). Received: device={device!r}")
        count = torch.cuda.device_count()
        index = int(match.group(2)) if match.group(2) else _local_rank() % count
        if index >= count:
            raise UserError(f"device={device!r}: this machine has {count} CUDA GPU(s), cuda:0 to "
                            f"cuda:{count - 1}. Received: index {index}")
        return torch.device("cuda", index)

    def _parse_backend(self, backend):
        torch, dist = self._torch, self._dist
        if backend is None:
            backend = "gloo" if self._on_cpu else "nccl"
        if backend not in BACKENDS:
            raise UserError(f"Unknown torch.distributed backend. Allowed values are {format_choices(BACKENDS)}. "
                            f"Received: backend={backend!r}")
        if backend == "nccl":
            if not (torch.cuda.is_available() and dist.is_nccl_available()):
                raise UserError(f"backend='nccl' needs CUDA GPUs and a PyTorch build with NCCL. Received: "
                                f"torch {torch.__version__}, torch.cuda.is_available()="
                                f"{torch.cuda.is_available()}, NCCL available={dist.is_nccl_available()}. "
                                f"Use backend='gloo' (CPU).")
            if self._on_cpu:
                raise UserError("backend='nccl' moves CUDA tensors. Allowed devices: 'cuda', 'cuda:N', 'gpu:N'. "
                                f"Received: device={str(self.device)!r}")
        elif not self._on_cpu:
            raise UserError(f"backend='gloo' moves CPU tensors here. Allowed: device='cpu' with gloo, or "
                            f"backend='nccl' for a CUDA device. Received: device={str(self.device)!r}")
        elif not dist.is_gloo_available():
            raise UserError(f"backend='gloo' is not in this PyTorch build (torch {torch.__version__}); install a "
                            f"PyTorch build with gloo for CPU tensors. Received: backend='gloo'")
        return backend

    def _pg_timeout(self):
        if self.timeout is None:
            return None
        return datetime.timedelta(seconds=self.timeout)

    def _rendezvous(self, init_method, rank, size) -> None:
        dist = self._dist
        kwargs = {} if self.timeout is None else {"timeout": self._pg_timeout()}
        if dist.is_initialized():
            have = dist.get_backend()
            if self.backend not in str(have):
                raise UserError(f"torch.distributed is already initialized with backend {have!r}. "
                                f"Allowed: the same backend (or backend=None for the default device). "
                                f"Received: backend={self.backend!r}")
            for name, given, actual in (("rank", rank, dist.get_rank()), ("size", size, dist.get_world_size())):
                if given is not None and given != actual:
                    raise UserError(f"torch.distributed is already initialized with {name} {actual}. "
                                    f"Received: {name}={given!r}")
            self.group = dist.group.WORLD
            return
        if init_method is not None:
            dist.init_process_group(self.backend, init_method=init_method,
                                    rank=-1 if rank is None else rank, world_size=-1 if size is None else size,
                                    **kwargs)
        elif all(os.environ.get(k) for k in _TORCHRUN_ENV) or (
                (rank is not None or size is not None) and os.environ.get("MASTER_ADDR")
                and os.environ.get("MASTER_PORT")):
            dist.init_process_group(self.backend, init_method="env://", rank=-1 if rank is None else rank,
                                    world_size=-1 if size is None else size, **kwargs)
        elif _mpi_launched():
            self._mpi_rendezvous(rank, size, kwargs)
        elif (size or 1) > 1 or rank not in (None, 0):
            raise UserError(f"rank and size need init_method= (e.g. 'tcp://HOST:PORT' or 'file:///PATH') or "
                            f"the environment variables MASTER_ADDR and MASTER_PORT. Received: rank={rank!r}, "
                            f"size={size!r}, init_method=None")
        else:
            self.rank, self.size = 0, 1
            return
        self._owns_group = True
        self.group = dist.group.WORLD

    def _mpi_rendezvous(self, rank, size, kwargs) -> None:
        from deep500lite.lv3.mpi import import_mpi, install_abort_on_exception

        dist = self._dist
        world = import_mpi().COMM_WORLD
        r, p = world.Get_rank(), world.Get_size()
        for name, given, actual in (("rank", rank, r), ("size", size, p)):
            if given is not None and given != actual:
                raise UserError(f"Launched by mpiexec as {name} {actual}; {name}= must match or be None. "
                                f"Received: {name}={given!r}")
        install_abort_on_exception()
        timeout = self._pg_timeout() or datetime.timedelta(minutes=30)
        hosts = world.allgather(socket.gethostname())
        store, address = None, None
        if r == 0:
            host = _host_address(hosts)
            store = self._dist.TCPStore(host, 0, p, is_master=True, wait_for_workers=False, timeout=timeout)
            address = f"{host}:{store.port}"
        address = world.bcast(address, root=0)
        if r != 0:
            host, port = address.rsplit(":", 1)
            store = dist.TCPStore(host, int(port), p, is_master=False, timeout=timeout)
        hook = sys.excepthook
        dist.init_process_group(self.backend, store=store, rank=r, world_size=p, **kwargs)
        # torch wraps sys.excepthook to prefix "[rankN]:" by capturing the wrapped hook's output
        # and printing it when that hook returns; the abort hook never returns (MPI_Abort), so
        # its message would be lost. It names the rank itself: put it back.
        sys.excepthook = hook

    def close(self) -> None:
        """Destroy the process group if this communicator created it (collective)."""
        if self._owns_group and self._dist.is_initialized():
            self._dist.destroy_process_group()
        elif self._p2p is not None and self._dist.is_initialized():
            self._dist.destroy_process_group(self._p2p)
        self._owns_group = False
        self.group = self._p2p = None

    def __repr__(self):
        return (f"TorchDistributedCommunicator(rank={self.rank}, size={self.size}, backend={self.backend!r}, "
                f"device={str(self.device)!r}, timeout={self.timeout})")

    # ------------------------------------------------------------- waiting
    def _wait(self, works, peers, what: str) -> None:
        """Wait for every work (one shared deadline); past the timeout, name the peer and raise."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        for i, work in enumerate(works):
            try:
                if deadline is None:
                    work.wait()
                else:
                    work.wait(datetime.timedelta(seconds=max(deadline - time.monotonic(), 1e-3)))
            except RuntimeError as exc:
                text = str(exc).lower()
                if deadline is not None and (time.monotonic() >= deadline or "timed out" in text
                                             or "timeout" in text):
                    pending = [peers[i]] if i < len(peers) else []
                    raise _common.timeout_error(self.rank, self.size, what, self.timeout, pending) from exc
                raise _failure(self, what, exc) from exc

    def _collective(self, work, what: str) -> None:
        self._wait([work], ["the other ranks (collective)"], what)

    def _exchange(self, group, sends, recvs, tag: int, op: str, what: str) -> None:
        """Post every receive and send at once, wait for all, count their bytes under ``op``."""
        dist = self._dist
        staged_recvs = [_Staged(self, arr, True, False) for arr, _ in recvs]
        ops, peers = [], []
        for staged, (arr, source) in zip(staged_recvs, recvs):
            ops.append(dist.P2POp(dist.irecv, staged.tensor, source, group, tag))
            peers.append(f"a message from rank {source} ({arr.nbytes} bytes)")
        for arr, dest in sends:
            ops.append(dist.P2POp(dist.isend, _Staged(self, arr, True, True).tensor, dest, group, tag))
            peers.append(f"rank {dest} to receive {arr.nbytes} bytes")
        if ops:
            self._wait(dist.batch_isend_irecv(ops), peers, what)
        for staged in staged_recvs:
            staged.download()
        self._count(op, sent=sum(a.nbytes for a, _ in sends), received=sum(a.nbytes for a, _ in recvs))

    # ------------------------------------------------------------ checking
    def _check_rank(self, rank, name: str) -> None:
        _common.check_rank(rank, self.size, name)

    def _check_p2p(self, peer, name: str) -> None:
        self._check_rank(peer, name)
        if self.group is None:
            raise UserError(f"Point-to-point messages need a process group of at least 2 ranks; this "
                            f"communicator has one rank and none. Received: {name}={peer!r}")

    @staticmethod
    def _array(x) -> np.ndarray:
        """A C-contiguous, writable numpy array with ``x``'s data (``x`` itself when it is one)."""
        arr = np.ascontiguousarray(x)
        if arr.dtype.hasobject:
            raise UserError(f"Communicators move numeric arrays. Received: dtype={arr.dtype}")
        return arr if arr.flags.writeable else arr.copy()

    def _check_reducible(self, x: np.ndarray, operation: str) -> None:
        if x.dtype not in _REDUCIBLE:
            raise UserError(f"{operation} with torch.distributed ({self.backend}) reduces "
                            f"{', '.join(str(d) for d in _REDUCIBLE)} arrays. Received: dtype={x.dtype}; "
                            f"use algorithm='ring' (any numpy dtype) or cast first.")

    # ---------------------------------------------------------- allreduce
    def calibrate(self, **kwargs) -> _ar.AlphaBeta:
        """Measure the alpha-beta model on this communicator and keep it as :attr:`cost_model`.

        Collective: every rank must call it. A ping-pong between ranks 0 and 1; rank 0's numbers
        are broadcast so every rank chooses alike. Keyword arguments go to
        :func:`deep500lite.lv3.allreduce.calibrate`.
        """
        def share(values):
            if self.group is None:
                return values
            staged = _Staged(self, values, True, True)
            self._collective(self._dist.broadcast(staged.tensor, src=0, group=self._p2p, async_op=True),
                             "calibrate (broadcast)")
            staged.download()
            return values

        self.cost_model = _ar.calibrate(_common.Transport(self, "calibrate"), share=share, **kwargs)
        return self.cost_model

    def allreduce(self, x: np.ndarray, op: str = "sum", algorithm: str = "native") -> np.ndarray:
        """Combine ``x`` element-wise over all ranks; every rank gets the result.

        Args:
            x: an array with the same shape and dtype on every rank (any layout; not modified).
            op: ``sum``, ``mean`` (sum, then divided by ``size``), ``max``, ``min`` or ``prod``.
            algorithm: ``native`` (``torch.distributed.all_reduce``), ``ring``,
                ``recursive_doubling``, ``rabenseifner``, ``tree`` (point-to-point messages, see
                :mod:`deep500lite.lv3.allreduce`) or ``auto`` (the least predicted time).

        Returns:
            A new array shaped like ``x``.
        """
        x = np.asarray(x)
        _common.check_op(op, x)
        _common.check_algorithm(algorithm, _ar.ALGORITHMS)
        self._count("allreduce", call=True)
        if algorithm == "auto":
            algorithm = self.choose_algorithm(x.nbytes)
        if algorithm == "native" and self.group is not None:
            self._check_reducible(x, "allreduce(native)")
            out = np.array(x, copy=True, order="C")
            staged = _Staged(self, out, False, True)
            self._collective(self._dist.all_reduce(staged.tensor, op=self._ops[op], group=self.group,
                                                   async_op=True), "allreduce(native)")
            staged.download()
            sent, received = _common.native_volume("allreduce", x.nbytes, self.size, self.rank)
            self._count("allreduce", sent, received)
        elif algorithm == "native" or self.size == 1:
            out = np.array(x, copy=True, order="C")
        else:
            out = _ar.run_allreduce(_common.Transport(self, "allreduce"), x, "sum" if op == "mean" else op, algorithm)
        return _common.finish_mean(out, op, self.size)

    def iallreduce(self, x: np.ndarray, op: str = "sum", out: np.ndarray | None = None) -> Request:
        """Start ``torch.distributed.all_reduce(async_op=True)`` on ``x``'s data (``out=x``: in place)
        and return at once; see :meth:`CommunicationNetwork.iallreduce`.

        The backend's own threads move the data (gloo on the CPU, NCCL's stream on a GPU, where
        the array is copied to the device first and the result back when the request completes).
        """
        x, out = _common.iallreduce_start(self, x, op, out)
        if out is not x:
            out[...] = x
        if self.group is None:
            return CompletedRequest(self, out)
        self._check_reducible(x, "iallreduce")
        staged = _Staged(self, out, False, True)
        work = self._dist.all_reduce(staged.tensor, op=self._ops[op], group=self.group, async_op=True)
        return _TorchAllreduce(self, work, staged, op)

    # ------------------------------------------------- other collectives
    def broadcast(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        """Return ``root``'s ``x`` on every rank (elsewhere ``x`` gives the shape and dtype)."""
        self._check_rank(root, "root")
        buf = np.array(x, copy=True, order="C")
        if self.group is not None:
            staged = _Staged(self, buf, True, self.rank == root)
            self._collective(self._dist.broadcast(staged.tensor, src=root, group=self.group, async_op=True),
                             f"broadcast(root={root})")
            staged.download()
        sent, received = _common.native_volume("broadcast", buf.nbytes, self.size, self.rank, root)
        self._count("broadcast", sent, received, call=True)
        return buf

    def gather(self, x: np.ndarray, root: int = 0) -> list[np.ndarray] | None:
        """Collect every rank's ``x`` at ``root``: a list in rank order there, None elsewhere.

        ``x`` must have the same shape and dtype on every rank.
        """
        self._check_rank(root, "root")
        send = self._array(x)
        recv = np.empty((self.size,) + send.shape, send.dtype) if self.rank == root else None
        if self.group is None:
            recv[0] = send
        else:
            staged = [_Staged(self, part, True, False) for part in recv] if recv is not None else None
            work = self._dist.gather(_Staged(self, send, True, True).tensor,
                                     None if staged is None else [s.tensor for s in staged],
                                     dst=root, group=self.group, async_op=True)
            self._collective(work, f"gather(root={root})")
            for s in staged or ():
                s.download()
        sent, received = _common.native_volume("gather", send.nbytes, self.size, self.rank, root)
        self._count("gather", sent, received, call=True)
        return None if recv is None else list(recv)

    def sync_all_at_root(self, x: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Sum ``x`` over all ranks at ``root`` only (None elsewhere), with ``torch.distributed.reduce``."""
        self._check_rank(root, "root")
        x = np.asarray(x)
        out = np.array(x, copy=True, order="C")
        if self.group is not None:
            self._check_reducible(x, "reduce")
            staged = _Staged(self, out, False, True)
            self._collective(self._dist.reduce(staged.tensor, dst=root, group=self.group, async_op=True),
                             f"reduce(root={root})")
            if self.rank == root:
                staged.download()
        sent, received = _common.native_volume("reduce", out.nbytes, self.size, self.rank, root)
        self._count("reduce", sent, received, call=True)
        return out if self.rank == root else None

    def allgather(self, x: np.ndarray) -> list[np.ndarray]:
        """Collect every rank's ``x`` (same shape and dtype everywhere) on every rank, in rank order."""
        send = self._array(x)
        recv = np.empty((self.size,) + send.shape, send.dtype)
        if self.group is None:
            recv[0] = send
        else:
            staged = [_Staged(self, part, True, False) for part in recv]
            self._collective(self._dist.all_gather([s.tensor for s in staged], _Staged(self, send, True, True).tensor,
                                                   group=self.group, async_op=True), "allgather")
            for s in staged:
                s.download()
        sent, received = _common.native_volume("allgather", send.nbytes, self.size, self.rank)
        self._count("allgather", sent, received, call=True)
        return list(recv)

    def reduce_scatter(self, x: np.ndarray, op: str = "sum", algorithm: str = "native") -> np.ndarray:
        """Reduce ``x`` over ranks and return this rank's contiguous block of the flat result.

        Block ``r`` holds elements ``[r * n // size, (r + 1) * n // size)`` of the flattened
        result, ``n = x.size``.

        Args:
            x: the array (same shape and dtype on every rank).
            op: as for :meth:`allreduce`.
            algorithm: ``native`` (``torch.distributed.reduce_scatter``, which gloo and NCCL both
                provide, blocks of unequal length included) or ``ring``.
        """
        x, b, lo, hi, out = _common.reduce_scatter_start(self, x, op, algorithm, single=self.group is None)
        if out is None:
            self._check_reducible(x, "reduce_scatter(native)")
            send = self._array(x).reshape(-1)
            out = np.empty(hi - lo, x.dtype)
            staged = _Staged(self, out, False, False)
            parts = [_Staged(self, send[b[i]:b[i + 1]], False, True).tensor for i in range(self.size)]
            try:
                work = self._dist.reduce_scatter(staged.tensor, parts, op=self._ops[op], group=self.group,
                                                 async_op=True)
            except (RuntimeError, NotImplementedError, ValueError):
                # An older build without reduce_scatter for this backend or for blocks of unequal
                # length: allreduce the whole array and keep this rank's block.
                full = _Staged(self, send.copy(), False, True)
                self._collective(self._dist.all_reduce(full.tensor, op=self._ops[op], group=self.group,
                                                       async_op=True), "reduce_scatter(native, allreduce)")
                staged.tensor.copy_(full.tensor[lo:hi])
            else:
                self._collective(work, "reduce_scatter(native)")
            staged.download()
            sent, received = _common.native_volume("reduce_scatter", send.nbytes, self.size, self.rank,
                                                   own_bytes=out.nbytes)
            self._count("reduce_scatter", sent, received)
        return _common.finish_mean(out, op, self.size)

    def neighbor_exchange(self, x: np.ndarray, left: int | None = None,
                          right: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Send ``x`` to both neighbours and receive theirs (collective); see the base class.

        With one rank both results are copies of ``x``.
        """
        left, right, send, from_left, from_right, done = _common.neighbor_exchange_start(self, x, left, right)
        if done:
            return from_left, from_right
        # A message going right carries _TAG_RIGHT (gloo matches tags). NCCL ignores tags but
        # matches in posting order, and every rank posts left before right for receives and
        # right before left for sends, so the two messages between two ranks pair up correctly.
        dist = self._dist
        staged = [_Staged(self, from_left, True, False), _Staged(self, from_right, True, False)]
        tensor = _Staged(self, send, True, True).tensor
        ops = [dist.P2POp(dist.irecv, staged[0].tensor, left, self._p2p, _TAG_RIGHT),
               dist.P2POp(dist.irecv, staged[1].tensor, right, self._p2p, _TAG_LEFT),
               dist.P2POp(dist.isend, tensor, right, self._p2p, _TAG_RIGHT),
               dist.P2POp(dist.isend, tensor, left, self._p2p, _TAG_LEFT)]
        peers = [f"a message from rank {left} (left)", f"a message from rank {right} (right)",
                 f"rank {right} to receive", f"rank {left} to receive"]
        self._wait(dist.batch_isend_irecv(ops), peers, "neighbor_exchange")
        for s in staged:
            s.download()
        self._count("neighbor_exchange", sent=2 * send.nbytes, received=2 * send.nbytes)
        return from_left, from_right

    def barrier(self) -> None:
        """Wait until every rank has reached this call."""
        if self.group is not None:
            self._collective(self._dist.barrier(group=self.group, async_op=True), "barrier")

    # ------------------------------------------------------ point to point
    def send(self, x: np.ndarray, dest: int, tag: int = 0) -> None:
        """Send ``x`` to rank ``dest`` (returns once the buffer may be reused)."""
        self._check_p2p(dest, "dest")
        send = self._array(x)
        work = self._dist.isend(_Staged(self, send, True, True).tensor, dest, group=self.group, tag=tag)
        self._wait([work], [f"rank {dest} to receive {send.nbytes} bytes"], f"send(dest={dest}, tag={tag})")
        self._count("send", sent=send.nbytes, call=True)

    def recv(self, like: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        """Receive an array shaped and typed like ``like`` from rank ``source``."""
        self._check_p2p(source, "source")
        out = np.empty_like(np.asarray(like), order="C")
        staged = _Staged(self, out, True, False)
        work = self._dist.irecv(staged.tensor, source, group=self.group, tag=tag)
        self._wait([work], [f"a message from rank {source} ({out.nbytes} bytes)"],
                   f"recv(source={source}, tag={tag})")
        staged.download()
        self._count("recv", received=out.nbytes, call=True)
        return out

    def isend(self, x: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Start sending a copy of ``x`` to rank ``dest``; see :meth:`CommunicationNetwork.isend`."""
        self._check_p2p(dest, "dest")
        staged = _Staged(self, np.array(x, copy=True, order="C"), True, True)
        self._count("isend", call=True)
        work = self._dist.isend(staged.tensor, dest, group=self.group, tag=tag)
        return _TorchRequest(self, work, staged, dest, True, f"isend(dest={dest}, tag={tag})")

    def irecv(self, like: np.ndarray, source: int, tag: int = 0) -> Request:
        """Start receiving an array like ``like`` from rank ``source``; see :meth:`CommunicationNetwork.irecv`."""
        self._check_p2p(source, "source")
        staged = _Staged(self, np.empty_like(np.asarray(like), order="C"), True, False)
        self._count("irecv", call=True)
        work = self._dist.irecv(staged.tensor, source, group=self.group, tag=tag)
        return _TorchRequest(self, work, staged, source, False, f"irecv(source={source}, tag={tag})")

    def recv_any(self, like: np.ndarray, tag: int = 0) -> tuple[np.ndarray, int]:
        """Receive an array shaped and typed like ``like`` from whichever rank sends first (gloo only).

        Returns:
            ``(array, source_rank)``.
        """
        if self.group is None:
            raise UserError("recv_any needs a process group of at least 2 ranks; this communicator has one rank. "
                            f"Received: size={self.size}")
        if self.backend != "gloo":
            raise UserError(f"recv_any (a receive from any rank) needs backend='gloo'; NCCL has none. "
                            f"Received: backend={self.backend!r}")
        out = np.empty_like(np.asarray(like), order="C")
        staged = _Staged(self, out, True, False)
        work = self._dist.irecv(staged.tensor, src=None, group=self.group, tag=tag)
        self._wait([work], ["a message from any rank"], f"recv_any(tag={tag})")
        self._count("recv", received=out.nbytes, call=True)
        return out, int(work._source_rank())


class HorovodDistributedOptimizer(HorovodOptimizerBase):
    """Deep500's ``HorovodDistributedOptimizer(optimizer, comm=None)`` for torch executors.

    Averages every gradient over the ranks with ``horovod.torch.allreduce(op=Average)`` before
    ``optimizer`` applies it, and starts every rank from rank 0's parameters
    (``horovod.torch.broadcast``); see :class:`~deep500lite.lv3.horovod.HorovodOptimizerBase`.
    Deep500 had it for TensorFlow only; this is the same adapter for torch.

    Checked on two Horovod ranks (gloo) by ``tests/lv3/test_horovod_adapter.py``, which runs where
    Horovod is installed (Horovod 0.28.1 built from source with C++17 for torch 2.x; see
    docs/porting-from-deep500.md); ``scripts/setup.sh`` does not install Horovod.

    Args:
        optimizer: the base optimizer, such as ``d5fw.MomentumOptimizer(executor, "loss", 0.1, 0.9)``.
        comm: kept as ``communication``; Horovod does not use it.
        root_rank: the rank whose parameters every rank starts from.

    Raises:
        FrameworkNotAvailableError: ``horovod.torch`` cannot be imported; the message names the package.
    """

    horovod_module = "horovod.torch"
    framework = "PyTorch"

    def _allreduce_mean(self, array: np.ndarray, name: str) -> np.ndarray:
        return self.hvd.allreduce(self._torch_tensor(array), op=self.hvd.Average, name=name).numpy()

    def _broadcast(self, array: np.ndarray, name: str) -> np.ndarray:
        return self.hvd.broadcast(self._torch_tensor(array), self.root_rank, name=name).numpy()

    @staticmethod
    def _torch_tensor(array: np.ndarray):
        import torch

        return torch.from_numpy(np.array(array, copy=True))
