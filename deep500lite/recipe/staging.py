"""A run's results folder replaced whole: outputs are written to a staging folder, then swapped in.

``deep500lite run`` writes every output (results.json, epochs.csv, steps.csv, plots, the MLPerf
log) into a staging folder beside the target, ``.<name>.d5-partial-<pid>-<token>``, and only when
the run has finished swaps it with the target. A reader therefore sees either the old complete
set or the new complete set, never a mix, whatever moment the run is interrupted at:

- on Linux the swap is one ``renameat2(RENAME_EXCHANGE)`` system call (atomic); the old set,
  now under the staging name, is then deleted;
- elsewhere (or on a file system without it) the old folder is renamed aside
  (``.<name>.d5-old-<pid>-<token>``) and the new one renamed in; a run killed between the two
  renames leaves no target but the old folder aside, which the next run (:func:`recover`) and
  ``deep500lite report`` (:func:`restore_aside`) put back;
- a target that holds files other than a run's outputs (``--out .``), or is a symbolic link, is
  never swapped or deleted: the new files are moved into it one by one, ``results.json`` last.

An exception (Ctrl-C, and SIGTERM or SIGHUP in the CLI, included) removes the staging folder and
leaves the old set as it was; SIGINT, SIGTERM and SIGHUP are held back during the renames and the
removal themselves, so they never stop either half-way.
A process killed outright (SIGKILL) leaves its staging folder behind: the next run into the
same target removes staging folders whose process is gone, and ``deep500lite report`` skips
every staging folder (:func:`is_staging_name`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shutil

from deep500lite.errors import UserError
from deep500lite.processes import signals_held

__all__ = ["staged_folder", "recover", "restore_aside", "is_staging_name", "published_path", "RUN_OUTPUTS"]

#: Names a run writes into its results folder; a folder holding only these is a run's folder.
RUN_OUTPUTS = ("results.json", "epochs.csv", "steps.csv", "loss.png", "accuracy.png", "mllog.log", "second-run",
               "stderr.log", "step_times.png", "baseline")

_STAGING = re.compile(r"^\.(?P<base>.+)\.d5-(?P<kind>partial|old)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def is_staging_name(name: str) -> bool:
    """Whether a folder name is a staging or set-aside folder of a run (readers skip these)."""
    return _STAGING.match(name) is not None


def published_path(path) -> str:
    """Where a file written inside a staging folder will be once the folder is swapped in (other paths as given)."""
    parts = os.path.abspath(os.fspath(path)).split(os.sep)
    return os.sep.join(m.group("base") if (m := _STAGING.match(p)) and m.group("kind") == "partial" else p
                       for p in parts)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _siblings(target: str):
    parent, base = os.path.split(target)
    try:
        names = os.listdir(parent or ".")
    except OSError:
        return
    for name in names:
        m = _STAGING.match(name)
        if m and m.group("base") == base:
            yield os.path.join(parent, name), m.group("kind"), int(m.group("pid"))


def recover(target, delete: bool = True) -> None:
    """Tidy what an interrupted run left beside ``target``.

    A set-aside old folder is put back when the target is missing (a run killed between its two
    renames); staging folders and set-aside folders of processes that are gone are deleted.

    Args:
        target: the results folder.
        delete: also delete the leftovers (``report`` only puts an old set back).
    """
    target = os.path.abspath(os.fspath(target))
    for path, kind, pid in sorted(_siblings(target), key=lambda t: t[1] != "old"):
        if _alive(pid):
            continue
        if kind == "old" and not os.path.exists(target):
            with contextlib.suppress(OSError):
                os.rename(path, target)
                continue
        if delete:
            shutil.rmtree(path, ignore_errors=True)


def restore_aside(folder) -> None:
    """Put back, inside ``folder``, every old results set a killed run left aside with no set in its place."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _STAGING.match(name)
        if m and m.group("kind") == "old" and not os.path.exists(os.path.join(folder, m.group("base"))):
            recover(os.path.join(folder, m.group("base")), delete=False)


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _is_run_folder(path: str) -> bool:
    return all(name in RUN_OUTPUTS or name.startswith("rank") or name.startswith(".tmp-")
               for name in os.listdir(path))


def _commit(work: str, target: str, token: str, ours=_is_run_folder, carry=None) -> None:
    if not os.path.lexists(target):
        os.rename(work, target)
        return
    if not os.path.isdir(target):
        raise UserError(f"The results folder '{target}' is a file; give a folder for --out. Received: {target!r}")
    if os.path.islink(target) or not ours(target):
        # Someone else's folder: never swapped or deleted; the new outputs are moved in one by one.
        names = sorted(os.listdir(work), key=lambda n: n == "results.json")
        for name in names:
            dest = os.path.join(target, name)
            if os.path.isdir(dest) and not os.path.islink(dest):
                shutil.rmtree(dest)
            os.replace(os.path.join(work, name), dest)
        os.rmdir(work)
        return
    if _exchange(work, target):
        if carry is not None:
            carry(work, target)  # work is now the old set
        shutil.rmtree(work, ignore_errors=True)
        return
    parent, base = os.path.split(target)
    aside = os.path.join(parent, f".{base}.d5-old-{os.getpid()}-{token}")
    os.rename(target, aside)
    os.rename(work, target)
    if carry is not None:
        carry(aside, target)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def staged_folder(target, ours=None, carry=None):
    """Write a run's outputs into a staging folder that replaces ``target`` whole on success.

    Args:
        target: the results folder (made if missing).
        ours: ``ours(path)`` says whether a folder holds only this kind of outputs (and may be
            swapped whole); default: a run's (:data:`RUN_OUTPUTS`).
        carry: ``carry(old, new)``, called right after the swap (signals held) with the old set's
            folder and the new one, moves what the new set should keep of the old one.

    Yields:
        The staging folder's path (beside ``target``, on the same file system). A caller that
        removes it drops its run: nothing is swapped in, and ``target`` stays as it was.

    Raises:
        UserError: the folder beside ``target`` cannot be written, or ``target`` is a file.
    """
    target = os.path.abspath(os.fspath(target))
    parent, base = os.path.split(target)
    if os.path.isfile(target):
        raise UserError(f"The results folder '{target}' is a file; give a folder for --out. Received: {target!r}")
    token = secrets.token_hex(4)
    work = os.path.join(parent, f".{base}.d5-partial-{os.getpid()}-{token}")
    try:
        try:
            os.makedirs(parent, exist_ok=True)
            recover(target)
            os.mkdir(work)
        except OSError as exc:
            raise UserError(f"Cannot write the results folder '{target}' ({exc.strerror or exc}); give a writable "
                            f"folder for --out. Received: {target!r}") from exc
        yield work
        if not os.path.isdir(work):  # the caller removed it: its run is dropped, the old set stays
            return
        try:
            with signals_held():
                _commit(work, target, token, ours or _is_run_folder, carry)
        except OSError as exc:
            raise UserError(f"Cannot move the new results into '{target}' ({exc.strerror or exc}); the old results "
                            f"are left as they were. Received: {target!r}") from exc
    finally:
        if os.path.exists(work):
            with signals_held():  # a second Ctrl-C does not leave half a staging folder behind
                shutil.rmtree(work, ignore_errors=True)
