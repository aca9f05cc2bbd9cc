"""Level 3: :class:`CommunicationVolume`, the bytes this process's communicators moved during a test.

Deep500's ``CommunicationVolume`` read the network cards' counters with ``ifstat``; this one
reads the byte counters every deep500lite communicator keeps (see
:class:`~deep500lite.lv3.communication.CommunicationNetwork`), so it counts exactly the traffic of
the training (not other programs' traffic on the card, and also between ranks of one machine,
which never reaches a card).
"""

from __future__ import annotations

from deep500lite.errors import UserTypeError
from deep500lite.lv3.communication import CommunicationNetwork, live_communicators
from deep500lite.metrics.base import TestMetric

__all__ = ["CommunicationVolume", "format_bytes"]


def format_bytes(num: float) -> str:
    """``num`` bytes in binary units with one decimal: ``"512.0B"``, ``"1.5KiB"``, ``"2.0MiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"):
        if abs(num) < 1024.0:
            return f"{num:.1f}{unit}"
        num /= 1024.0
    return f"{num:.1f}YiB"


class CommunicationVolume(TestMetric):
    """Bytes sent and received by this rank between ``begin`` and ``end`` (Deep500's metric).

    In ``d5.test_training(..., metrics=[..., d5.CommunicationVolume()])`` it measures the whole
    training. It counts every communicator of this process (the one given as ``comm``, or, by
    default, every :class:`~deep500lite.lv3.communication.CommunicationNetwork` alive at
    ``end``, such as the one ``d5.CommunicationNetwork()`` created), using the counters each
    keeps: every byte of point-to-point messages and of the allreduce algorithms written in
    deep500lite, and for collectives run inside the MPI library the bytes of the direct exchange
    (an allreduce of ``n`` bytes on ``p`` ranks: ``2 (p-1)/p n`` each way; see
    :class:`~deep500lite.lv3.mpi.MPICommunicator`).

    Args:
        tool_path: Deep500's path of ``ifstat``; accepted for compatibility and unused (nothing is
            run).
        prettyprint: :meth:`measure_summary` returns ``"1.5MiB"`` rather than ``"1572864"``.
        comm: count only this communicator.

    Attributes:
        bytes_sent, bytes_received: the totals of the last measurement.
    """

    higher_is_better = False
    name = "communication volume"

    def __init__(self, tool_path: str | None = None, prettyprint: bool = True,
                 comm: CommunicationNetwork | None = None):
        super().__init__()
        if comm is not None and not isinstance(comm, CommunicationNetwork):
            raise UserTypeError("comm must be None or a deep500lite CommunicationNetwork (such as "
                                f"d5.CommunicationNetwork()). Received: {type(comm).__name__}")
        self.tool_path = tool_path
        self.prettyprint = bool(prettyprint)
        self.comm = comm
        self._begin: dict[int, tuple[int, int]] = {}
        self._end: dict[int, tuple[int, int]] | None = None
        self._labels: dict[int, str] = {}
        self.bytes_sent = 0
        self.bytes_received = 0

    def _snapshot(self) -> dict[int, tuple[int, int]]:
        comms = [(self.comm.serial, self.comm)] if self.comm is not None else live_communicators()
        out = {}
        for serial, c in comms:
            self._labels[serial] = f"{type(c).__name__}#{serial}"
            out[serial] = (int(c.bytes_received), int(c.bytes_sent))
        return out

    def begin(self, inputs=None, *args):
        """Record the counters (before the measured work)."""
        self._begin = self._snapshot()
        self._end = None
        return inputs

    def end(self, outputs=None, *args):
        """Record the counters again (after the measured work)."""
        self._end = self._snapshot()
        return outputs

    def measure(self, *args) -> dict[str, tuple[int, int]]:
        """Per communicator, ``(received, sent)`` bytes between ``begin`` and ``end``.

        As Deep500's, which gave ``(received, sent)`` per network card: the keys here name the
        communicators (``"MPICommunicator#1"``). A communicator created after ``begin`` counts
        from zero; before ``end`` is called, the counters are read now.
        """
        end = self._end if self._end is not None else self._snapshot()
        out = {}
        for serial, (received, sent) in end.items():
            r0, s0 = self._begin.get(serial, (0, 0))
            out[self._labels[serial]] = (received - r0, sent - s0)
        self.bytes_received = sum(v[0] for v in out.values())
        self.bytes_sent = sum(v[1] for v in out.values())
        return out

    def total(self) -> int:
        """Bytes sent plus received by this rank between ``begin`` and ``end``."""
        self.measure()
        return self.bytes_sent + self.bytes_received

    def measure_summary(self, *args) -> str:
        """The total bytes moved to and from this rank: ``"1.5MiB"``, or ``"1572864"`` without prettyprint."""
        total = self.total()
        return format_bytes(total) if self.prettyprint else str(total)

    def __repr__(self) -> str:
        return f"CommunicationVolume(prettyprint={self.prettyprint})"
