"""The hook the writers of results call: record a document in the database named by ``DEEP500LITE_DB``.

:func:`stamp` adds the label (``DEEP500LITE_LABEL``) and the machine's name to a document
before it is written; :func:`record_results` (recipe results files: ``run``, ``compare``'s
runs, every rank of ``run -n`` and its aggregate) and :func:`record_payload` (the JSON of a
``bench ...`` or ``model ...`` command) record it after. The CLI sets ``DEEP500LITE_DB`` for the
commands it runs (``--db``, else the default ``d5-results/deep500lite.sqlite``), and the
processes those commands start inherit it; code calling deep500lite as a library records only
when ``DEEP500LITE_DB`` is set.

Recording never loses what was measured: the file is written first, and a database that
cannot be reached (or a missing SQLAlchemy) costs one warning on stderr naming the file and the
command that records it later (``deep500lite db import PATH``), not the run.
"""

from __future__ import annotations

import json
import os
import sys

from deep500lite.results.config import ENV_COMMAND, ENV_DB, ENV_LABEL, ENV_SESSION, machine_name, parse_target

__all__ = ["stamp", "record_results", "record_payload", "recording_target"]


def recording_target():
    """The target named by ``DEEP500LITE_DB``, or None (unset, ``none``, or not a valid target)."""
    text = os.environ.get(ENV_DB)
    if not text:
        return None
    try:
        return parse_target(text)
    except Exception as exc:  # noqa: BLE001 - a bad value is reported, the run goes on
        _warn(f"DEEP500LITE_DB is not a database ({exc})", None)
        return None


def stamp(document: dict) -> dict:
    """Add ``label`` (from ``DEEP500LITE_LABEL``) and ``environment.machine`` to a document; returns it."""
    label = os.environ.get(ENV_LABEL)
    if label:
        document["label"] = label
    env = document.get("environment")
    if isinstance(env, dict) and not env.get("machine"):
        env["machine"] = machine_name()
    return document


def _warn(reason: str, path) -> None:
    later = f"; {path} is complete: record it later with `deep500lite db import {path}`" if path else ""
    print(f"deep500lite: warning: results not recorded in the database: {reason}{later}", file=sys.stderr,
          flush=True)


def _record(make, path) -> int | None:
    target = recording_target()
    if target is None:
        return None
    try:
        from deep500lite.results.store import opened

        record = make()
        with opened(target) as store:
            return store.record(record)
    except Exception as exc:  # noqa: BLE001 - the results file is written; recording is best effort
        message = " ".join(str(exc).split()) or type(exc).__name__
        _warn(f"{target.shown}: {message}", path)
        return None


def record_results(path, document) -> int | None:
    """Record a recipe results document written to ``path`` (when ``DEEP500LITE_DB`` names a database).

    Args:
        path: the file it was written to.
        document: the results dict, or its JSON text (parsed only when recording).

    Returns:
        The run's id in the database, or None when nothing was recorded.
    """
    from deep500lite.results.extract import from_results

    path = os.path.abspath(os.fspath(path)) if path is not None else None
    def make():
        doc = json.loads(document) if isinstance(document, str) else document
        return from_results(doc, path, command=os.environ.get(ENV_COMMAND) or "api",
                            session=os.environ.get(ENV_SESSION), machine=machine_name())

    return _record(make, path)


def record_payload(path, payload: dict, command: str) -> int | None:
    """Record the JSON a ``bench ...`` or ``model ...`` command wrote to ``path``.

    Returns:
        The run's id in the database, or None when nothing was recorded.
    """
    from deep500lite.results.extract import from_payload

    path = os.path.abspath(os.fspath(path)) if path is not None else None
    return _record(lambda: from_payload(payload, command, path, session=os.environ.get(ENV_SESSION),
                                        label=os.environ.get(ENV_LABEL) or None, machine=machine_name(),
                                        recorded=os.path.getmtime(path) if path and os.path.exists(path) else None),
                   path)
