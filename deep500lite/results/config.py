"""Where results are recorded: the database target, the label, the machine's name.

A target is given by ``--db`` (or the environment variable ``DEEP500LITE_DB``):

- a file path (``d5-results/deep500lite.sqlite``, the default) or ``sqlite:///PATH``: an SQLite
  database, one file, nothing to start;
- ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME`` (or ``postgres://``): a PostgreSQL
  server, reached with psycopg 3 (SQLAlchemy's ``postgresql+psycopg`` dialect);
- ``none`` (or ``off``): record nothing.

The label (``--label`` or ``DEEP500LITE_LABEL``) names a set of runs (``baseline``, ``pr-123``,
``torch-2.13``); the machine's name is ``DEEP500LITE_MACHINE`` when set (give CI runners with
changing host names one), else the host name. This module imports no database library.
"""

from __future__ import annotations

import dataclasses
import os
import re
import urllib.parse

from deep500lite.environment import machine_name
from deep500lite.errors import UserError

__all__ = ["Target", "parse_target", "resolve_target", "check_label", "machine_name", "DEFAULT_DB", "ENV_DB",
           "ENV_LABEL", "ENV_MACHINE", "ENV_SESSION", "ENV_COMMAND", "OFF"]

#: The database a command records into when neither ``--db`` nor ``DEEP500LITE_DB`` names one.
DEFAULT_DB = os.path.join("d5-results", "deep500lite.sqlite")
ENV_DB, ENV_LABEL, ENV_MACHINE = "DEEP500LITE_DB", "DEEP500LITE_LABEL", "DEEP500LITE_MACHINE"
#: Set by the CLI for the commands it starts: an id shared by the runs of one command, and the command's name.
ENV_SESSION, ENV_COMMAND = "DEEP500LITE_SESSION", "DEEP500LITE_COMMAND"
#: Values of ``--db`` that turn recording off.
OFF = ("none", "off")

_MAX_LABEL = 200


@dataclasses.dataclass(frozen=True)
class Target:
    """A database to record into or read from.

    Attributes:
        url: the SQLAlchemy URL (``sqlite:////abs/path`` or ``postgresql+psycopg://...``).
        kind: ``sqlite`` or ``postgresql``.
        shown: the target as messages show it (a path, or the URL without its password).
        path: the SQLite file (absolute), or None for a server.
        given: the text it was made from (absolute path for a file), which child processes inherit.
    """

    url: str
    kind: str
    shown: str
    path: str | None
    given: str


def _hide_password(parts: urllib.parse.SplitResult) -> str:
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(":" + parts.password + "@", ":***@", 1)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def parse_target(text: str) -> Target | None:
    """The target named by ``text`` (a path, ``sqlite:///PATH``, a PostgreSQL URL), or None for ``none``.

    Raises:
        UserError: an empty value, another URL scheme, or a PostgreSQL URL without a database name.
    """
    if not isinstance(text, str) or not text.strip():
        raise UserError("--db needs a database: a file path (an SQLite database), postgresql://USER@HOST/DBNAME, "
                        f"or none. Received: {text!r}")
    text = text.strip()
    if text.lower() in OFF:
        return None
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        parts = urllib.parse.urlsplit(text)
        if not parts.hostname and "host=" not in parts.query:
            raise UserError(f"A PostgreSQL URL needs a host: postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME. "
                            f"Received: {_hide_password(parts)!r}")
        if not parts.path.strip("/"):
            raise UserError(f"A PostgreSQL URL needs a database name after the host: "
                            f"postgresql://USER@HOST[:PORT]/DBNAME. Received: {_hide_password(parts)!r}")
        url = urllib.parse.urlunsplit(("postgresql+psycopg",) + tuple(parts[1:]))
        return Target(url, "postgresql", _hide_password(parts), None, text)
    if scheme == "sqlite":
        path = text.split("://", 1)[1]
        path = path[1:] if path.startswith("/") else path  # sqlite:///rel or sqlite:////abs
        if not path:
            raise UserError(f"An SQLite URL needs a file: sqlite:///PATH. Received: {text!r}")
    elif scheme:
        raise UserError(f"Unknown database URL scheme '{scheme}://'. Allowed: a file path (SQLite), sqlite:///PATH, "
                        f"postgresql://USER@HOST/DBNAME, or none. Received: {text!r}")
    else:
        path = text
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(path):
        raise UserError(f"--db names a folder; give the database file inside it (for example "
                        f"{os.path.join(text, 'deep500lite.sqlite')}). Received: {text!r}")
    return Target("sqlite:///" + path, "sqlite", path, path, path)


def resolve_target(given: str | None = None) -> Target | None:
    """The target of a command: ``given`` (``--db``), else ``DEEP500LITE_DB``, else :data:`DEFAULT_DB`.

    Returns:
        The target, or None when recording is off (``none``).
    """
    if given is None:
        given = os.environ.get(ENV_DB) or DEFAULT_DB
    return parse_target(given)


def check_label(text: str) -> str:
    """A label as given, checked: 1 to 200 printable characters.

    Raises:
        UserError: an empty label, one with control characters, or a longer one.
    """
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"A label must be a non-empty name such as baseline or pr-123. Received: {text!r}")
    if len(text) > _MAX_LABEL or re.search(r"[\x00-\x1f\x7f]", text):
        raise UserError(f"A label must be at most {_MAX_LABEL} printable characters (no newlines or control "
                        f"characters). Received: {text[:60]!r}{'...' if len(text) > 60 else ''}")
    return text
