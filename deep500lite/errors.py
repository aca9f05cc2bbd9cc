"""Errors raised by deep500lite: one hierarchy, rooted at :class:`Deep500Error`.

Every exception class deep500lite defines lives here and derives from :class:`Deep500Error`;
where it helps callers, a class also derives from the matching built-in (``ValueError``,
``TypeError``, ``ImportError``, ``TimeoutError``, ...) so ``except ValueError`` keeps working.

Every message says what was wrong, what is allowed and what was received, in that order, the
received value last as ``Received: ...``. The CLI (:func:`deep500lite.cli.main`) prints any
:class:`Deep500Error` in one line and exits with status 2; any other exception is a bug in
deep500lite and is shown as ``internal error: ... (rerun with --traceback)`` with exit status 1.

Hierarchy::

    Deep500Error
    ├── UserError (ValueError)             a mistake the user can fix
    │   ├── UserTypeError (TypeError)      an argument of the wrong kind
    │   ├── UserAttributeError (AttributeError)  a name the object does not have (a hyperparameter)
    │   ├── UserKeyError (KeyError)        a name that is not in a collection (a tensor, an output)
    │   ├── UserIndexError (IndexError)    an index outside a dataset, or not an index at all
    │   ├── ModelError                     an ONNX model that cannot be read or is invalid
    │   ├── FeedError                      feeds that do not match the network's inputs
    │   ├── UnsupportedOperatorError (NotImplementedError)
    │   ├── DeviceError                    a malformed or absent device
    │   ├── MissingDatasetError (FileNotFoundError)
    │   ├── CorruptFileError               a data file that is truncated or malformed
    │   ├── ExampleParseError              bytes that are not a tf.train.Example
    │   ├── CompilationError               a custom C++/CUDA operator the compiler rejected
    │   └── CheckpointError                a checkpoint missing, corrupt or not fitting
    ├── FrameworkNotAvailableError (ImportError)
    ├── DatasetNotAvailableError (ImportError)  a dataset of Deep500's that deep500lite has no loader for
    ├── CppOpError (RuntimeError)          a C++ operator that failed while running
    ├── ExecutionError (RuntimeError)      an executor that failed at run time (names the ONNX node)
    ├── ModelExportError (RuntimeError)    a framework's ONNX exporter that failed on a model
    ├── NonFiniteLossError (FloatingPointError)
    ├── CommunicationTimeout (TimeoutError)
    ├── JobTimeout (RuntimeError)          an MPI job killed at its time limit
    │   └── StartupTimeout                 a rank that never reached MPI initialisation
    └── RankFailure (RuntimeError)         a rank that exited, raised, crashed or was killed: the job was ended
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover - for annotations only
    from deep500lite.lv2.trainer import TrainingStats

__all__ = [
    "Deep500Error",
    "NetemMissing",
    "SignalReceived",
    "UserError",
    "UserTypeError",
    "UserAttributeError",
    "UserKeyError",
    "UserIndexError",
    "ModelError",
    "FeedError",
    "UnsupportedOperatorError",
    "FrameworkNotAvailableError",
    "DatasetNotAvailableError",
    "DeviceError",
    "MissingDatasetError",
    "CorruptFileError",
    "ExampleParseError",
    "CompilationError",
    "CheckpointError",
    "CppOpError",
    "ExecutionError",
    "ModelExportError",
    "NonFiniteLossError",
    "CommunicationTimeout",
    "JobTimeout",
    "StartupTimeout",
    "RankFailure",
    "format_choices",
]


class Deep500Error(Exception):
    """Base class of every error deep500lite raises on purpose."""


class UserError(Deep500Error, ValueError):
    """A mistake the user can fix: a bad argument, file, name or value."""


class UserTypeError(UserError, TypeError):
    """An argument of the wrong kind (a list where a dict is needed, a string where a Network is)."""


class UserAttributeError(UserError, AttributeError):
    """A name the object does not have, such as an unknown hyperparameter of an optimizer."""


class UserKeyError(UserError, KeyError):
    """A name that is not in a collection, such as a tensor an executor does not hold.

    Unlike a plain ``KeyError``, its message is shown as written, not quoted.
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)


class UserIndexError(UserError, IndexError):
    """An index outside a collection (a dataset of 10 samples asked for sample 10), or not an index (1.5).

    Deriving from ``IndexError`` keeps Python's iteration protocol (``for sample in dataset``) working.
    """


class ModelError(UserError):
    """An ONNX model that cannot be read or is not valid (names the file and the fault)."""


class FeedError(UserError):
    """Feeds that do not match the network's declared inputs (name, shape or dtype)."""


class UnsupportedOperatorError(UserError, NotImplementedError):
    """An ONNX operator that an executor cannot run (names the operator, node and alternatives)."""


class FrameworkNotAvailableError(Deep500Error, ImportError):
    """A framework (or another optional package, such as scikit-learn) that is not installed.

    The message names the extra to install.
    """


class DatasetNotAvailableError(Deep500Error, ImportError):
    """A dataset Deep500 could load that deep500lite has no loader for (ImageNet's TFRecord files, UCF101).

    An ImportError, as Deep500's loaders raised for a missing dependency, so a script that skips
    such datasets with ``except ImportError`` goes on. The message names the loaders to use instead.
    """


class DeviceError(UserError):
    """A device that is malformed or not present on this machine."""


class MissingDatasetError(UserError, FileNotFoundError):
    """A dataset file that is not where deep500lite looks (the message says where to put it)."""


class CorruptFileError(UserError):
    """A dataset file that cannot be what it claims: bad magic number, wrong length, CRC mismatch.

    Attributes:
        path: the file.
        offset: the byte offset of the fault, when known.
    """

    def __init__(self, path, fault: str, offset: int | None = None):
        self.path, self.offset = os.fspath(path), offset
        where = f" at byte offset {offset}" if offset is not None else ""
        super().__init__(f"Corrupt dataset file '{self.path}'{where}: {fault}")


class ExampleParseError(UserError):
    """Bytes that are not a valid serialized ``tf.train.Example``."""


class CompilationError(UserError):
    """The compiler rejected a custom operator's source.

    The message's first line names the operator, the file and the first error; then come the
    offending source lines, the command and the full compiler output.

    Attributes:
        source_path: the source file that was compiled.
        line: the line of the first error in ``source_path`` (None when unknown).
        command: the compiler command, as a list.
        compiler_output: everything the compiler printed.
    """

    def __init__(self, message: str, *, source_path: str, line: int | None, command: Sequence[str],
                 compiler_output: str):
        super().__init__(message)
        self.source_path = source_path
        self.line = line
        self.command = list(command)
        self.compiler_output = compiler_output


class CheckpointError(UserError):
    """A checkpoint that is missing, corrupt, or does not fit the trainer (names the file and the fault)."""


class CppOpError(Deep500Error, RuntimeError):
    """A C++ operator failed while running: it threw a C++ exception or a CUDA call failed.

    Attributes:
        op_name: the operator's name.
        member: the member that failed (``create_new_op``, ``forward``, ``backward_cuda``, ...).
    """

    def __init__(self, message: str, *, op_name: str, member: str):
        super().__init__(message)
        self.op_name = op_name
        self.member = member


class ExecutionError(Deep500Error, RuntimeError):
    """An executor failed while running a network: its framework raised at run time.

    The message names the executor, the ONNX node (name and op type), the shapes of the node's
    inputs where they are known, and the framework's own message.

    Attributes:
        executor: the executor's framework name (``"tensorflow"``).
        node: the failing node's name, or ``None`` when the framework does not say which node.
        op_type: the failing node's operator, or ``None``.
        input_shapes: the node's input shapes where known (``None`` for an unknown one).
        cause: the framework's own message.
    """

    def __init__(self, message: str, *, executor: str, node: str | None = None, op_type: str | None = None,
                 input_shapes: Sequence | None = None, cause: str = ""):
        super().__init__(message)
        self.executor, self.node, self.op_type = executor, node, op_type
        self.input_shapes = list(input_shapes) if input_shapes is not None else None
        self.cause = cause


class ModelExportError(Deep500Error, RuntimeError):
    """A framework's ONNX exporter failed on a model (torch.onnx.export, tf2onnx).

    The message names the model, the exporter and the exporter's own message.
    """


class NonFiniteLossError(Deep500Error, FloatingPointError):
    """The training loss became NaN or infinite; training stopped.

    Attributes:
        stats: the :class:`~deep500lite.TrainingStats` up to and including the offending step
            (summaries and metrics for the steps before it are kept).
        epoch: the epoch of the step (from 0).
        step: the step within the epoch (from 0).
        global_step: the step counted over the whole training (from 0).
    """

    def __init__(self, message: str, stats: "TrainingStats", epoch: int, step: int, global_step: int):
        super().__init__(message)
        self.stats, self.epoch, self.step, self.global_step = stats, epoch, step, global_step


class CommunicationTimeout(Deep500Error, TimeoutError):
    """A communication that waited longer than the communicator's timeout.

    The message names the rank that waited, the operation and the peer (or peers) it waited for.
    """


class JobTimeout(Deep500Error, RuntimeError):
    """An MPI job ran past its time limit and was killed (every process of it)."""


class StartupTimeout(JobTimeout):
    """A rank of an MPI job did not reach MPI initialisation in time; the job was killed."""


class RankFailure(Deep500Error, RuntimeError):
    """A rank of an MPI job exited early or with an error status, raised, or was killed by a signal; the
    whole job was ended. The message names the rank and the cause.

    Attributes:
        status: the exit status that stands for the rank's end (a signal N as 128 + N), for a
            command that passes it on (``deep500lite launch``).
        traceback: the rank's traceback, when an exception ended it (else None).
    """

    def __init__(self, message: str, status: int = 1, traceback: str | None = None):
        super().__init__(message)
        self.status, self.traceback = status, traceback


class NetemMissing(UserError):
    """``--latency`` asked of a kernel without the netem queueing discipline."""


class SignalReceived(Deep500Error):
    """A signal (SIGINT, SIGTERM, ...) that a command turned into an exception to clean up before it ends.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def format_choices(choices) -> str:
    """Format allowed values as ``'a', 'b', 'c'`` for error messages."""
    return ", ".join(repr(c) for c in choices)
