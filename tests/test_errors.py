"""One error hierarchy: every exception class is a Deep500Error defined in deep500lite/errors.py, and every
message of an error about a value the caller gave ends with ``Received: <the value>``.

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


# -- one wording: what was wrong, what is allowed, then "Received: <the value>" -------------------------------------

# Errors about a value the caller gave: every raise of one says what it received.
VALUE_ERRORS = frozenset({"UserError", "UserTypeError", "UserKeyError", "UserAttributeError", "FeedError",
                          "DeviceError", "ModelError", "UnsupportedOperatorError", "NetemMissing",
                          "UserIndexError"})
# Errors about a file's contents, the environment or a failed run, where no value was passed in.
EXEMPT_ERRORS = {
    "CorruptFileError": "describes a file's bytes (path, offset and fault), not a value the caller passed",
    "ExampleParseError": "describes the bytes of a tf.train.Example, not a value the caller passed",
    "MissingDatasetError": "names the file that is missing and where to put it",
    "CheckpointError": "describes a checkpoint file's contents",
    "FrameworkNotAvailableError": "the environment: names the extra to install",
    "DatasetNotAvailableError": "a loader deep500lite does not have: names the loaders to use instead",
    "CompilationError": "the compiler's verdict on a source file, with its output",
    "CppOpError": "a C++ operator that failed while running",
    "ExecutionError": "a framework that failed while running a node (names the node, its shapes, the executor)",
    "ModelExportError": "an exporter's verdict on a model, with its message",
    "NonFiniteLossError": "a training run whose loss diverged",
    "CommunicationTimeout": "a collective that waited too long for a peer",
    "JobTimeout": "an MPI job killed at its time limit",
    "StartupTimeout": "an MPI job killed because a rank did not reach MPI initialisation (names the ranks)",
    "RankFailure": "an MPI job ended because one of its ranks failed (names the rank and how it ended)",
    "SignalReceived": "a signal that stops a command, caught to clean up; never shown as an error",
}
RECEIVED = "Received:"
# Raise sites where no received value exists, as (file, fragment of the message's text): reason.
RECEIVED_ALLOWLIST = {
    ("deep500lite/lv0/cppop/op.py", "was closed; compile or load it again"):
        "a call on an operator after close(): the call passed nothing that is wrong",
}


def _class_name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a module, class or function body, without those of the functions and classes inside it."""
    out, stack = [], list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _message_texts(expr: ast.expr, assigned: dict[str, list[ast.expr]], seen: frozenset = frozenset()) -> list[str]:
    """The string constants of a message expression (f-string parts included), following names to their values."""
    texts = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
        elif isinstance(node, ast.Name) and node.id in assigned and node.id not in seen:
            for value in assigned[node.id]:
                texts += _message_texts(value, assigned, seen | {node.id})
    return texts


def _wrapped_value_errors(tree: ast.AST) -> set[int]:
    """Raises whose message ends with the text of the value error being handled.

    ``except UserError as exc: raise UserError(f"Recipe 'r.py' failed while loading: {exc}")``: the handled
    message already ends with ``Received: ...``, so the new one does too.
    """
    wrapped = set()
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or handler.type is None or not handler.name:
            continue
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if not all(_class_name(t) in VALUE_ERRORS for t in types):
            continue
        for node in ast.walk(handler):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                msg = node.exc.args[0]
                last = msg.values[-1] if isinstance(msg, ast.JoinedStr) and msg.values else None
                if (isinstance(last, ast.FormattedValue) and isinstance(last.value, ast.Name)
                        and last.value.id == handler.name):
                    wrapped.add(id(node))
    return wrapped


def _raises_without_received(rel: str, source: str) -> list[tuple[str, int, str, str]]:
    """``(file, line, class, message text)`` of each raise of a value error whose message lacks "Received:".

    What counts as the message: the first argument of ``raise SomeError(...)``, its string constants and the
    literal parts of f-strings, joined by ``+`` or not; a name in it is followed to the values assigned to
    that name before the raise in the same function (``msg = f"... Received: {x}"; raise UserError(msg)``).
    A raise inside ``except <value error> as exc`` whose message ends with ``{exc}`` wraps a message that
    already ends with ``Received:``. A value error raised without a message, or built by a helper
    (``raise self._error(...)``), is not looked into beyond that: the helper's own raise, if any, is.
    """
    tree = ast.parse(source, filename=rel)
    wrapped = _wrapped_value_errors(tree)
    found = []
    scopes = [tree] + [n for n in ast.walk(tree)
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for scope in scopes:
        nodes = _own_nodes(scope)
        for node in nodes:
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            call = node.exc if isinstance(node.exc, ast.Call) else None
            name = _class_name(call.func if call else node.exc)
            if name not in VALUE_ERRORS or id(node) in wrapped:
                continue
            assigned: dict[str, list[ast.expr]] = {}
            for n in nodes:
                if getattr(n, "lineno", node.lineno) >= node.lineno:
                    continue
                if isinstance(n, ast.Assign):
                    for target in n.targets:
                        if isinstance(target, ast.Name):
                            assigned.setdefault(target.id, []).append(n.value)
                elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name) and n.value:
                    assigned.setdefault(n.target.id, []).append(n.value)
            texts = _message_texts(call.args[0], assigned) if call and call.args else []
            if not any(RECEIVED in t for t in texts):
                found.append((rel, node.lineno, name, "".join(texts)))
    return sorted(found, key=lambda f: f[1])


def _allowed(rel: str, text: str) -> tuple | None:
    return next((key for key in RECEIVED_ALLOWLIST if key[0] == rel and key[1] in text), None)


def _source_files():
    for tree in SOURCE_TREES:
        for path in sorted((REPO / tree).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8")


def test_the_received_check_flags_a_planted_bad_raise():
    sample = """
def f(x, path):
    if x:
        raise UserError(f"x must be positive. Received: {x}")
    if path:
        raise errors.FeedError("Feed 'a' must be float32. " + f"Received: {x}")
    msg = f"Input {x} is bad; give a number. Received: {x!r}"
    raise ModelError(msg)

def g(x):
    raise UserError(f"x must be positive; got {x}.")

def h(x):
    raise DeviceError

def i(path):
    try:
        load(path)
    except UserError as exc:
        raise UserError(f"Recipe {path} failed while loading: {exc}") from exc
    except TypeError as exc:
        raise UserTypeError(f"Recipe {path} failed: {exc}") from exc

def j():
    raise CorruptFileError("/x", "bad magic number")

def k(received):
    raise UnsupportedOperatorError(f"Operator {received} is not supported.")

class Op:
    def close(self):
        raise UserError(f"C++ operator 'swish' was closed; compile or load it again.")
"""
    found = [(line, cls) for _, line, cls, _ in _raises_without_received("sample.py", sample)]
    assert found == [(11, "UserError"), (14, "DeviceError"), (22, "UserTypeError"), (28, "UnsupportedOperatorError"),
                     (32, "UserError")]
    assert _allowed("deep500lite/lv0/cppop/op.py", "C++ operator 'swish' was closed; compile or load it again.")
    assert not _allowed("sample.py", "C++ operator 'swish' was closed; compile or load it again.")


def test_every_error_class_is_checked_for_received_or_exempt():
    classes = {name for name in errors.__all__
               if inspect.isclass(getattr(errors, name)) and name != "Deep500Error"}
    assert not VALUE_ERRORS & set(EXEMPT_ERRORS)
    assert classes == VALUE_ERRORS | set(EXEMPT_ERRORS), (
        "classify each error class: a value error (its messages end with Received:) or exempt, with the reason",
        classes ^ (VALUE_ERRORS | set(EXEMPT_ERRORS)))


def test_every_value_error_message_says_what_it_received():
    bad, used = [], set()
    for rel, source in _source_files():
        for file, line, cls, text in _raises_without_received(rel, source):
            key = _allowed(file, text)
            if key:
                used.add(key)
            else:
                bad.append(f"{file}:{line}: raise {cls}({text[:70]!r}...)")
    assert not bad, ("raises of value errors whose message has no 'Received:' (say what was wrong, what is allowed, "
                     "then 'Received: <the value>'; an error about a file, the environment or a failed run belongs to "
                     "an exempt class):\n" + "\n".join(bad))
    assert used == set(RECEIVED_ALLOWLIST), ("allowlist entries that match no raise any more",
                                             set(RECEIVED_ALLOWLIST) - used)


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
    (errors.RankFailure, RuntimeError),
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
    with pytest.raises(errors.UserAttributeError, match="Plain has no hyperparameter 'rate'") as err:
        opt.set_parameter("rate", 0.5)
    assert isinstance(err.value, AttributeError)
