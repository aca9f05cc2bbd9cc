"""Recipe files: ``FIXED``, ``MUTABLE`` and ``METRICS`` (and an optional ``MLPERF``) read from a file or a bundled recipe.

:func:`load_recipe` imports a recipe file, or a bundled recipe by name (``deep500lite list
recipes``), without running its ``__main__`` block and checks the three names; :class:`Recipe`
holds them. :func:`parse_set` reads one ``--set KEY=VALUE``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import os
import sys
from typing import Any

from deep500lite.errors import UserError, format_choices
from deep500lite.recipe.resolution import ResolvedRecipe, resolve_recipe

__all__ = ["Recipe", "load_recipe", "parse_set"]

@dataclasses.dataclass(frozen=True)
class Recipe:
    """A recipe as read from a file (or given as objects).

    Attributes:
        fixed: the ``FIXED`` dict (as written; never modified).
        mutable: the ``MUTABLE`` dict.
        metrics: the ``METRICS`` list.
        path: the file it came from, or None.
        name: the file's name without ``.py`` (``"recipe"`` without a file).
        sha256: the SHA-256 of the file's bytes, or None.
        mlperf: the file's optional ``MLPERF`` dict: the submission fields of its MLPerf log
            (:func:`deep500lite.recipe.mlperf.submission_fields`), or None.
    """

    fixed: dict
    mutable: dict
    metrics: list
    path: str | None = None
    name: str = "recipe"
    sha256: str | None = None
    mlperf: dict | None = None

    def resolve(self, overrides: dict | None = None) -> "ResolvedRecipe":
        """:func:`resolve_recipe` of this recipe with ``overrides`` of mutable keys."""
        return resolve_recipe(self.fixed, self.mutable, self.metrics, overrides=overrides, path=self.path,
                              name=self.name, sha256=self.sha256)


def _bundled_recipes() -> dict[str, str]:
    import importlib.util

    # The folder of deep500lite.recipes, found without importing it (its recipes import this package).
    folder = importlib.util.find_spec("deep500lite.recipes").submodule_search_locations[0]
    return {f[:-3]: os.path.join(folder, f) for f in sorted(os.listdir(folder))
            if f.endswith(".py") and not f.startswith("_")}


def load_recipe(path_or_name) -> Recipe:
    """Read ``FIXED``, ``MUTABLE`` and ``METRICS`` from a recipe file without running its ``__main__`` block.

    The file is imported as a module under a name other than ``"__main__"`` (so an
    ``if __name__ == '__main__':`` block does not run), with its folder on ``sys.path`` while it
    loads (so it can import files next to it).

    Args:
        path_or_name: a ``.py`` file, or the name of a bundled recipe (``deep500lite list recipes``),
            such as ``"digits_lenet"``.

    Raises:
        UserError: the file does not exist, cannot be imported (the error and line are named), or
            lacks one of the three names, or one has the wrong type.
    """
    from deep500lite.input_files import input_path, read_input_bytes

    text = input_path(path_or_name, "Recipe")
    path = text
    if not os.path.lexists(path):
        bundled = _bundled_recipes()
        if text in bundled:
            path = bundled[text]
        else:
            raise UserError(f"Recipe file '{text}' does not exist. Give a recipe file (.py) or a bundled recipe: "
                            f"{format_choices(bundled) or 'none'}. Received: {text!r}")
    if os.path.isdir(path):
        raise UserError(f"Recipe '{path}' is a folder; give a recipe file (.py). Received: {text!r}")
    path = os.path.abspath(path)
    # the one read of the file: through the checked opener (a FIFO or a device is refused), bounded
    data = read_input_bytes(path, "Recipe (a .py file)", limit=64 * 2**20)
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = f"deep500lite_recipe_{stem}_{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"Recipe '{path}' cannot be imported as a Python module; a recipe is a .py file. "
                        f"Received: {text!r}")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    # Registered like any import, so code that looks a class's module up (dataclasses, pickle) finds it.
    sys.modules[module_name] = module
    try:
        try:
            with _exit_raises():  # the bytes read above, not a second read of the file
                code = compile(importlib.util.decode_source(data), path, "exec", dont_inherit=True)
                exec(code, module.__dict__)  # noqa: S102 - a recipe is the user's own Python file, run as an import
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    except SyntaxError as exc:
        raise UserError(f"Recipe '{path}' has a syntax error at line {exc.lineno}: {exc.msg}; a recipe is a Python "
                        f"file. Received: {(exc.text or '').strip()!r}") from exc
    except UserError as exc:
        raise UserError(f"Recipe '{path}' failed while loading: {exc}") from exc
    except UnicodeDecodeError as exc:
        line = bytes(exc.object[:exc.start]).count(b"\n") + 1
        raise UserError(f"Recipe '{path}' is not UTF-8 text (line {line}, byte {exc.start} cannot be decoded); a "
                        f"recipe is a Python source file. Received: the byte {exc.object[exc.start:exc.start + 1]!r}"
                        ) from exc
    except SystemExit as exc:
        line = _user_line(exc, path)
        raise UserError(f"Recipe '{path}' exited while loading{line} (sys.exit, exit() or os._exit at module level); "
                        "a recipe file is imported, so put the run in an `if __name__ == '__main__':` block. Received: exit "
                        f"status {exc.code!r}") from exc
    except Exception as exc:  # noqa: BLE001 - any error in the user's file is the user's to fix
        line = _user_line(exc, path)
        raise UserError(f"Recipe '{path}' failed while loading{line}: {type(exc).__name__}; a recipe file must run "
                        f"without error when imported. Received: {str(exc) or '(no message)'}") from exc
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    missing = [n for n in ("FIXED", "MUTABLE", "METRICS") if not hasattr(module, n)]
    if missing:
        defined = [n for n in ("FIXED", "MUTABLE", "METRICS") if n not in missing]
        raise UserError(f"Recipe '{path}' does not define {', '.join(missing)}. A recipe file defines FIXED (dict of "
                        "fixed components), MUTABLE (dict of mutable components) and METRICS (list of "
                        f"(metric, threshold)). Received: a file defining {', '.join(defined) or 'none of them'}")
    for name, kind in (("FIXED", dict), ("MUTABLE", dict), ("METRICS", (list, tuple))):
        if not isinstance(getattr(module, name), kind):
            raise UserError(f"Recipe '{path}': {name} must be a {'dict' if kind is dict else 'list'}. "
                            f"Received: {type(getattr(module, name)).__name__}")
    mlperf = getattr(module, "MLPERF", None)
    if mlperf is not None and not isinstance(mlperf, dict):
        raise UserError(f"Recipe '{path}': MLPERF must be a dict of MLPerf submission fields (org, platform, division, "
                        f"status, benchmark). Received: {type(mlperf).__name__}")
    return Recipe(module.FIXED, module.MUTABLE, list(module.METRICS), path, stem, hashlib.sha256(data).hexdigest(),
                  mlperf)


@contextlib.contextmanager
def _exit_raises():
    """While a recipe file loads, ``os._exit`` in this process raises SystemExit (reported like ``sys.exit``)
    instead of ending the process with no word and no results (a forked child still exits as asked)."""
    real, loader = os._exit, os.getpid()

    def refuse(status):
        if os.getpid() != loader:
            real(status)
        raise SystemExit(status)

    os._exit = refuse
    try:
        yield
    finally:
        os._exit = real


def _user_line(exc: BaseException, path: str) -> str:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line})" if line else ""


def parse_set(text: str) -> tuple[str, Any]:
    """Parse one ``--set key=value``: the value as a Python literal, else as a string.

    ``key`` may be dotted to set one entry of a dict: ``optimizer_kwargs.learning_rate=0.1``.

    >>> parse_set("batch_size=32"), parse_set("executor=torch"), parse_set("epochs=[1, 2]")
    (('batch_size', 32), ('executor', 'torch'), ('epochs', [1, 2]))

    Raises:
        UserError: no ``=`` or an empty key.
    """
    import ast

    from deep500lite.options import check_no_control

    if not isinstance(text, str):
        raise UserError(f"--set takes key=value text (such as batch_size=32). Received: {type(text).__name__}")
    if "=" not in text:
        raise UserError(f"--set takes key=value (such as batch_size=32). Received: {text!r}")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key:
        raise UserError(f"--set needs a key before '='. Received: {text!r}")
    check_no_control(key, "--set: the key", " (a recipe key such as batch_size or optimizer_kwargs.learning_rate)")
    if len(value) > 65536:
        raise UserError(f"--set: the value of {key!r} is {len(value):,} characters, more than the 65,536 allowed. "
                        f"Received: {value[:40]!r}...")
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        parsed = value.strip()
    return key, parsed
