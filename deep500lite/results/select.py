"""Selections of runs: what ``regress BASELINE CANDIDATE`` compares.

A selection is one of::

    label:NAME                 the runs recorded with --label NAME
    commit:SHA[,SHA...]        the runs at these git commits (prefixes of 4+ hex digits)
    run:ID[,ID...]             these run ids (ranges too: run:3-7)
    date:START[..END]          the runs started on these days (YYYY-MM-DD, or YYYY-MM-DDTHH:MM[:SS];
                               END included; local time)

A bare value is tried, in that order, as a label, a commit, run ids and a date; one that
matches more than one kind, or none, is refused with the choices named.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re

from deep500lite.errors import UserError

__all__ = ["Selection", "parse_selection", "KINDS"]

KINDS = ("label", "commit", "run", "date")

_HEX = re.compile(r"^[0-9a-fA-F]{4,40}(-dirty)?$")
_IDS = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclasses.dataclass(frozen=True)
class Selection:
    """A set of runs, as store filters.

    Attributes:
        kind: ``label``, ``commit``, ``run`` or ``date``.
        text: the selection as given.
        filters: keyword arguments of :meth:`deep500lite.results.store.Store.series`.
    """

    kind: str
    text: str
    filters: dict

    def describe(self) -> str:
        """The selection in words (``label 'baseline'``)."""
        return f"{self.kind} {self.text.split(':', 1)[1] if ':' in self.text else self.text!r}"


def _ids(text: str, given: str) -> list[int]:
    if not _IDS.match(text):
        raise UserError(f"run: takes run ids: run:12, run:3,4 or run:3-7. Received: {given!r}")
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a or b - a > 100_000:
            raise UserError(f"A run id range goes from the smaller id to the larger (at most 100000 ids). "
                            f"Received: {given!r}")
        out.extend(range(a, b + 1))
    return out


def _when(text: str, given: str, end: bool) -> float:
    try:
        if _DAY.match(text):
            day = _dt.datetime.strptime(text, "%Y-%m-%d")
            return (day + _dt.timedelta(days=1) if end else day).timestamp()
        return _dt.datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise UserError(f"date: takes days or times: date:2026-11-27, date:2026-11-01..2026-11-30, "
                        f"date:2026-11-27T09:00..2026-11-27T18:00. Received: {given!r} ({exc})") from None


def _dates(text: str, given: str) -> dict:
    start, sep, stop = text.partition("..")
    since = _when(start, given, False) if start else None
    until = _when(stop if sep else start, given, True) if (stop or not sep) else None
    if since is not None and until is not None and until <= since:
        raise UserError(f"A date range goes from the earlier date to the later one. Received: {given!r}")
    return {"since": since, "until": until}


def _looks_like_date(text: str) -> bool:
    return bool(re.match(r"^\d{4}-\d{2}-\d{2}", text) or text.startswith(".."))


def parse_selection(text: str, store) -> Selection:
    """Resolve a selection against a store (see the module documentation).

    Raises:
        UserError: an empty or malformed selection, an unknown label, or a bare value that is
            ambiguous or matches nothing.
    """
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"A selection names runs: label:NAME, commit:SHA, run:ID or date:START..END. "
                        f"Received: {text!r}")
    given = text
    kind, sep, value = text.partition(":")
    if sep and kind in KINDS:
        if not value:
            raise UserError(f"{kind}: needs a value after the colon. Received: {given!r}")
        if kind == "label":
            return Selection("label", given, {"label": value})
        if kind == "commit":
            commits = [c.strip() for c in value.split(",") if c.strip()]
            bad = [c for c in commits if not _HEX.match(c)]
            if bad or not commits:
                raise UserError(f"commit: takes git commits (4 to 40 hex digits), comma-separated. "
                                f"Received: {given!r}")
            return Selection("commit", given, {"commits": commits})
        if kind == "run":
            return Selection("run", given, {"run_ids": _ids(value, given)})
        return Selection("date", given, {k: v for k, v in _dates(value, given).items() if v is not None})
    matches = []
    if text in store.distinct("label"):
        matches.append(Selection("label", given, {"label": text}))
    if _HEX.match(text) and any(c.startswith(text) for c in store.distinct("git_commit")):
        matches.append(Selection("commit", given, {"commits": [text]}))
    if _IDS.match(text):
        ids = _ids(text, given)
        if store.runs(run_ids=ids):
            matches.append(Selection("run", given, {"run_ids": ids}))
    if _looks_like_date(text):
        matches.append(Selection("date", given, {k: v for k, v in _dates(text, given).items() if v is not None}))
    if len(matches) > 1:
        kinds = ", ".join(f"{m.kind}:{text}" for m in matches)
        raise UserError(f"'{text}' could be several selections; say which: {kinds}. Received: {given!r}")
    if not matches:
        labels = store.distinct("label")
        shown = ", ".join(labels[:10]) + (f", ... ({len(labels)} labels)" if len(labels) > 10 else "")
        raise UserError(f"'{text}' is no label, commit, run id or date in {store.target.shown}. Give label:NAME, "
                        f"commit:SHA, run:ID or date:START..END (labels recorded: {shown or 'none'}). "
                        f"Received: {given!r}")
    return matches[0]
