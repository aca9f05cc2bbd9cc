"""One error hierarchy: every exception class is a Deep500Error defined in deep500lite/errors.py.

The source of the core (``deep500lite/``), the framework packages (``frameworks/``) and the metrics
(``metrics/``) is parsed, not imported, so a framework that is not installed is checked too.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

import pytest

import deep500lite as d5
from deep500lite import errors

REPO = Path(__file__).resolve().parents[1]
while not (REPO / "pyproject.toml").is_file() and REPO != REPO.parent:  # tests/ may hold subfolders
    REPO = REPO.parent
SOURCE_TREES = ("deep500lite", "frameworks", "metrics")
ERRORS_FILE = "deep500lite/errors.py"
BUILTIN_EXCEPTIONS = {name for name, obj in vars(builtins).items()
                      if inspect.isclass(obj) and issubclass(obj, BaseException)}


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # module.SomeError
        return node.attr
    if isinstance(node, ast.Subscript):  # Generic[T]
        return _base_name(node.value)
    return None


def _classes_in(rel: str, source: str) -> list[tuple[str, int, str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        if isinstance(node, ast.ClassDef):
            found.append((rel, node.lineno, node.name, [b for b in map(_base_name, node.bases) if b]))
    return found


def _class_definitions() -> list[tuple[str, int, str, list[str]]]:
    """``(file, line, class name, base names)`` of every class in the source trees."""
    found = []
    for tree in SOURCE_TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            found += _classes_in(path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8"))
    return found


def _exception_classes(definitions=None) -> list[tuple[str, int, str, bool]]:
    """``(file, line, class name, derives from Deep500Error)`` of every exception class in the sources.

    Bases are followed by name through the sources; a base not defined there is an exception when it is
    a built-in one or, from a third-party package, is named like one (``...Error``, ``...Exception``).
    Warning categories are not errors and are left out.
    """
    definitions = _class_definitions() if definitions is None else definitions
    bases_of: dict[str, list[str]] = {}
    for _, _, name, bases in definitions:
        bases_of.setdefault(name, []).extend(bases)

    def reaches(name: str, goal, seen: frozenset = frozenset()) -> bool:
        if goal(name):
            return True
        return name not in seen and any(reaches(b, goal, seen | {name}) for b in bases_of.get(name, []))

    def foreign_exception(name: str) -> bool:
        return name in BUILTIN_EXCEPTIONS or (name not in bases_of and name.endswith(("Error", "Exception")))

    def warning(name: str) -> bool:
        return name in BUILTIN_EXCEPTIONS and name.endswith("Warning")

    out = []
    for file, line, name, bases in definitions:
        if any(reaches(b, foreign_exception) for b in bases) and not any(reaches(b, warning) for b in bases):
            ok = name == "Deep500Error" or any(reaches(b, lambda n: n == "Deep500Error") for b in bases)
            out.append((file, line, name, ok))
    return out


def test_the_source_walk_finds_exception_classes_by_their_bases():
    sample = """
class Deep500Error(Exception): pass
class UserError(Deep500Error, ValueError): pass
class Good(UserError): pass
class Bad(ValueError): pass
class AlsoBad(Bad): pass
class Foreign(onnx.checker.ValidationError): pass
class _Skip(Exception): pass
class L1Error(_ErrorMetric): pass
class _ErrorMetric(TestMetric): pass
class Wide(UserWarning): pass
"""
    verdicts = {name: ok for _, _, name, ok in _exception_classes(_classes_in("sample.py", sample))}
    assert verdicts == {"Deep500Error": True, "UserError": True, "Good": True, "Bad": False, "AlsoBad": False,
                        "Foreign": False, "_Skip": False}


def test_the_source_walk_sees_the_known_classes():
    found = {(f, n) for f, _, n, _ in _exception_classes()}
    assert (ERRORS_FILE, "Deep500Error") in found and (ERRORS_FILE, "CorruptFileError") in found
    names = {n for _, _, n, _ in _class_definitions()}
    assert {"GraphExecutor", "Network", "TestMetric"} <= names  # core, lv1 and metrics are parsed


def test_every_exception_class_derives_from_deep500error():
    bad = [f"{file}:{line}: class {name}" for file, line, name, ok in _exception_classes() if not ok]
    assert not bad, ("exception classes that do not derive from deep500lite.errors.Deep500Error (define them in "
                     "deep500lite/errors.py, with a ValueError/TypeError/... mixin where callers need one):\n"
                     + "\n".join(bad))


def test_every_exception_class_lives_in_errors_py():
    elsewhere = [f"{file}:{line}: class {name}" for file, line, name, _ in _exception_classes() if file != ERRORS_FILE]
    assert not elsewhere, ("exception classes defined outside deep500lite/errors.py (move them there; the "
                           "defining module may re-export them):\n" + "\n".join(elsewhere))


def test_errors_module_classes_are_all_deep500errors_and_exported():
    classes = {name: obj for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__}
    assert set(classes) <= set(errors.__all__), set(classes) - set(errors.__all__)
    for name, cls in classes.items():
        assert issubclass(cls, errors.Deep500Error), name
        assert cls.__doc__, f"{name} has no docstring"


@pytest.mark.parametrize("cls,builtin", [
    (errors.UserError, ValueError),
    (errors.UserTypeError, TypeError),
    (errors.UserTypeError, errors.UserError),
    (errors.UserAttributeError, AttributeError),
    (errors.UserAttributeError, errors.UserError),
    (errors.UserKeyError, KeyError),
    (errors.UserKeyError, errors.UserError),
    (errors.ModelError, errors.UserError),
    (errors.FeedError, errors.UserError),
    (errors.UnsupportedOperatorError, NotImplementedError),
    (errors.UnsupportedOperatorError, errors.UserError),
    (errors.FrameworkNotAvailableError, ImportError),
    (errors.DeviceError, errors.UserError),
    (errors.MissingDatasetError, FileNotFoundError),
    (errors.MissingDatasetError, errors.UserError),
    (errors.CorruptFileError, errors.UserError),
    (errors.ExampleParseError, errors.UserError),
    (errors.CompilationError, errors.UserError),
    (errors.CheckpointError, errors.UserError),
    (errors.CppOpError, RuntimeError),
    (errors.NonFiniteLossError, FloatingPointError),
    (errors.CommunicationTimeout, TimeoutError),
    (errors.JobTimeout, RuntimeError),
], ids=lambda c: c.__name__)
def test_hierarchy(cls, builtin):
    assert issubclass(cls, builtin)
    assert issubclass(cls, errors.Deep500Error)


def test_errors_that_are_not_the_users_fault_are_not_user_errors():
    for cls in (errors.FrameworkNotAvailableError, errors.CppOpError, errors.NonFiniteLossError,
                errors.CommunicationTimeout, errors.JobTimeout):
        assert not issubclass(cls, errors.UserError), cls.__name__
    assert not issubclass(errors.Deep500Error, (ValueError, TypeError))


def test_mixins_keep_builtin_handlers_working():
    with pytest.raises(ValueError, match="Received: 3"):
        raise errors.UserTypeError("x must be a string. Received: 3")
    with pytest.raises(TypeError):
        raise errors.UserTypeError("x must be a string. Received: 3")
    with pytest.raises(FileNotFoundError):
        raise errors.MissingDatasetError("no file")
    with pytest.raises(KeyError) as key_err:
        raise errors.UserKeyError("No tensor 'w'. Received: 'w'")
    assert str(key_err.value) == "No tensor 'w'. Received: 'w'"  # not quoted, as a plain KeyError would be
    err = errors.CorruptFileError("/data/x.bin", "bad magic number", offset=4)
    assert str(err) == "Corrupt dataset file '/data/x.bin' at byte offset 4: bad magic number"
    assert (err.path, err.offset) == ("/data/x.bin", 4)


def test_public_names_are_the_errors_module_classes():
    for name in ("Deep500Error", "UserError", "ModelError", "FeedError", "UnsupportedOperatorError",
                 "FrameworkNotAvailableError", "DeviceError", "CompilationError", "CppOpError", "NonFiniteLossError"):
        assert getattr(d5, name) is getattr(errors, name), name


def test_format_choices():
    assert errors.format_choices(["a", 1]) == "'a', 1"


def test_unknown_hyperparameter_is_a_user_attribute_error():
    class Executor:
        network = None

    class Plain(d5.Optimizer):
        learning_rate = 0.1

        def step(self, inputs):
            return {}

    opt = Plain(Executor())
    opt.set_parameter("learning_rate", 0.5)
    assert opt.learning_rate == 0.5
    with pytest.raises(errors.UserAttributeError, match="Plain has no hyperparameter 'lr'") as err:
        opt.set_parameter("lr", 0.5)
    assert isinstance(err.value, AttributeError)
