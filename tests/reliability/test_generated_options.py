"""Bad values generated from the definitions, not listed by hand: every option of every command, every
recipe key with a declared type, every hyperparameter of every optimizer, every option of every zoo model.

The command-line part walks :func:`deep500lite.cli.build_parser` and derives, from each option's
declared type (:mod:`deep500lite.options`) or ``choices``, values it must refuse: text that is not
a number, numbers below the minimum and above the maximum, ``nan`` and ``inf``, a non-power of two,
a size with a unit that does not exist, an empty value, control characters (an ANSI escape, a
newline, a NUL byte), text longer than allowed, and, for paths, the special files their role
refuses (``/dev/zero``, a FIFO, a folder where a file is read, a file where a folder is written).
Each must end in one clean line: exit status 2, one line on stderr that starts with
``deep500lite``, names the option and shows no control character, nothing on stdout, no
traceback. A new option is covered as soon as it is declared; an option without a declared type
fails :func:`test_every_option_has_a_declared_type`.

Every bad value is tried (the parse is in-process and takes well under a millisecond); the hostile
strings added to a value are drawn from a seeded pool per option, the seed printed
(``DEEP500LITE_FUZZ_SEED`` repeats a run).
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import random

import pytest

import deep500lite as d5
import deep500lite.cli as cli
from deep500lite import datasets, networks
from deep500lite.errors import UserError
from deep500lite.escaping import has_control
from deep500lite.lv2.hyperparameters import HYPERPARAMETERS, check_hyperparameter
from deep500lite.options import (Choice, Flag, Integer, ListOf, Number, OneOf, Parsed, Path, Size, Sweep, Text,
                                 ValueType)
from deep500lite.recipe.keys import KEY_TYPES, RECIPE_KEYS

SEED = int(os.environ.get("DEEP500LITE_FUZZ_SEED", random.SystemRandom().randrange(2**31)))
# Strings nobody should find in a terminal line: each holds a control character.
HOSTILE_CONTROL = ["\x1b[31mred\x1b[0m", "line\nbreak", "nul\x00byte", "cr\rreturn", "bell\x07", "\x9bcsi",
                   "rtl\u202eoverride", "bidi\u2066isolate"]
# Passthrough arguments: the program and its own arguments after 'launch' and 'emulate'.
PASSTHROUGH = {("launch", "program"), ("launch", "-m"), ("emulate", "program")}


def _walk(parser: argparse.ArgumentParser, path: tuple):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen and sub.prog.split()[-1] == name:
                    seen.add(id(sub))
                    yield from _walk(sub, path + (name,))
            continue
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        yield path, action


def _name(action) -> str:
    return action.option_strings[-1] if action.option_strings else action.dest


def _options():
    return [(path, action) for path, action in _walk(cli.build_parser(), ())
            if (path[0] if path else "", _name(action)) not in PASSTHROUGH]


def _id(case) -> str:
    path, action = case
    return " ".join(path) + " " + _name(action)


OPTIONS = _options()


def test_the_walk_sees_every_command():
    commands = {path[0] for path, _ in OPTIONS if path}
    assert set(cli.SUBCOMMANDS) <= commands | {"list", "env"}, set(cli.SUBCOMMANDS) - commands
    assert len(OPTIONS) > 200, len(OPTIONS)


@pytest.mark.parametrize("case", OPTIONS, ids=_id)
def test_every_option_has_a_declared_type(case):
    _, action = case
    if action.nargs == 0:  # a switch: takes no value
        return
    assert isinstance(action.type, ValueType) or action.choices is not None, (
        f"{_id(case)} has no declared type: give it type= one of deep500lite.options (Integer, Number, Size, Text, "
        f"Path, Choice, ListOf, ...) or choices=")


# -- what each declared type must refuse --------------------------------------------------------------------------

def _integer_bad(t: Integer) -> list[str]:
    out = ["abc", "1.5", "0x10", "9" * 60, ""]
    if t.minimum is not None:
        out.append(str(t.minimum - 1))
    if t.maximum is not None:
        out.append(str(t.maximum + 1))
    if t.power_of_two:
        low = max(t.minimum or 1, 1)
        out.append(str(3 * (1 << max(0, low.bit_length() - 1)) if low > 2 else 3))
    if t.multiple_of and t.multiple_of > 1:
        out.append(str((t.minimum or t.multiple_of) + 1))
    return out


def _number_bad(t: Number) -> list[str]:
    out = ["nan", "inf", "-inf", "abc", "1e999", "1,5", ""]
    if t.minimum is not None:
        out.append(repr(t.minimum) if t.min_open else repr(t.minimum - max(1.0, abs(t.minimum))))
    if t.maximum is not None:
        out.append(repr(t.maximum) if t.max_open else repr(t.maximum + max(1.0, abs(t.maximum))))
    return out


def _size_bad(t: Size) -> list[str]:
    out = ["lots", "-4", "1.5KiB", "4XB", "9" * 30 + "TiB", ""]
    if t.minimum is not None and t.minimum > 0:
        out.append(str(t.minimum - 1) if not t.multiple_of or t.minimum - 1 > 0 else "0")
    if t.maximum is not None:
        out.append(str(t.maximum + 1))
    if t.multiple_of and t.multiple_of > 1:
        out.append(str(max(t.minimum or 0, t.multiple_of) + 1))
    return out


def _text_bad(t: Text) -> list[str]:
    out = ["x" * (t.max_length + 1)]
    if not t.allow_empty:
        out.append("")
    return out


def _special_files(role: str, tmp) -> list[str]:
    fifo = os.path.join(tmp, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    regular = os.path.join(tmp, "file.txt")
    if not os.path.exists(regular):
        with open(regular, "w") as f:
            f.write("x")
    return {"input": ["/dev/zero", fifo, tmp], "program": ["/dev/zero", fifo, tmp],
            "input-or-folder": ["/dev/zero", fifo], "input-or-name": ["/dev/zero", fifo],
            "output": [tmp, fifo, "/dev/zero", os.path.join(regular, "inside.json")],
            "folder": [regular, fifo, os.path.join(regular, "inside")]}[role]


def bad_values(t, tmp) -> list[str]:
    """Command-line texts the declared type ``t`` must refuse (for an argparse ``choices`` list, ``t`` is it)."""
    if isinstance(t, (list, tuple, dict, range)) or t is None:
        return ["no-such-choice", ""]
    if isinstance(t, Choice):
        return ["no-such-choice", ""]
    if isinstance(t, Size):
        return _size_bad(t)
    if isinstance(t, Integer):
        return _integer_bad(t)
    if isinstance(t, Number):
        return _number_bad(t)
    if isinstance(t, Path):
        return _text_bad(t) + _special_files(t.role, tmp)
    if isinstance(t, Text):
        return _text_bad(t)
    if isinstance(t, ListOf):
        items = [v for v in bad_values(t.item, tmp) if v and t.separator not in v][:4]
        out = [f"{v}" for v in items] + [",".join(["1", v]) for v in items[:2]]
        if t.min_items >= 1:
            out.append("")
        return out
    if isinstance(t, Sweep):
        return ["4..2", "1..", "..8", "a..b"] + [v for v in _integer_bad(t.item) if v][:4]
    if isinstance(t, Flag):
        return ["maybe", "2", ""]
    if isinstance(t, OneOf):
        return ["\x01", "x" * 5000]
    if isinstance(t, Parsed):
        return ["x" * 5000]
    raise AssertionError(f"no generator for {t!r}: add one here")


def _argv(path: tuple, action, value: str) -> list[str]:
    argv = list(path)
    if action.option_strings:
        return argv + [f"{action.option_strings[-1]}={value}"]
    parser = cli.build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    # positionals before this one get a value their type takes (a name that exists nowhere)
    for other in parser._actions:
        if other.dest == action.dest:
            break
        if not other.option_strings and not isinstance(other, argparse._SubParsersAction):
            argv.append("placeholder")
    return argv + [value]


@pytest.fixture(scope="module")
def cached_parser():
    parser = cli.build_parser()
    return lambda: parser


def _expect_clean(argv, action, capsys, monkeypatch, parser_factory):
    monkeypatch.setattr(cli, "build_parser", parser_factory)
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    shown = f"{argv!r} (DEEP500LITE_FUZZ_SEED={SEED})"
    assert rc == 2, f"{shown}: exit status {rc}, expected 2; stderr: {err[-500:]!r}"
    assert out == "", f"{shown}: wrote to stdout: {out[:300]!r}"
    assert err.endswith("\n") and err.count("\n") == 1, f"{shown}: not one line: {err[:600]!r}"
    line = err[:-1]
    assert line.startswith(("deep500lite ", "deep500lite:")), f"{shown}: {line[:300]!r}"
    assert "Traceback" not in line and "internal error" not in line, f"{shown}: {line[:300]!r}"
    assert not has_control(line), f"{shown}: a control character reached the terminal: {line[:300]!r}"
    names = list(action.option_strings) + [action.dest, str(action.metavar)]
    assert any(n in line for n in names if n), f"{shown}: the message does not name {names}: {line[:300]!r}"


@pytest.mark.parametrize("case", [c for c in OPTIONS if c[1].nargs != 0], ids=_id)
def test_every_option_refuses_what_its_type_refuses(case, tmp_path, capsys, monkeypatch, cached_parser):
    path, action = case
    monkeypatch.chdir(tmp_path)
    rng = random.Random(f"{SEED}:{_id(case)}")
    spec = action.type if isinstance(action.type, ValueType) else action.choices
    values = bad_values(spec, str(tmp_path))
    # control characters, alone and after a value that would otherwise be fine
    values += rng.sample(HOSTILE_CONTROL, 2) + ["ok" + rng.choice(HOSTILE_CONTROL)]
    for value in values:
        if not action.option_strings and value.startswith("-"):
            continue  # a positional cannot take a value that looks like an option
        if "\x00" in value and not action.option_strings:
            value = value.replace("\x00", "\x01")
        _expect_clean(_argv(path, action, value), action, capsys, monkeypatch, cached_parser)


@pytest.mark.parametrize("case", [c for c in OPTIONS if c[1].nargs == 0 and c[1].option_strings], ids=_id)
def test_every_switch_refuses_a_value(case, capsys, monkeypatch, cached_parser):
    path, action = case
    _expect_clean(list(path) + [f"{action.option_strings[-1]}=yes"], action, capsys, monkeypatch, cached_parser)


# -- the recipe schema, the optimizers, the zoo models --------------------------------------------------------------

def _python_bad(t) -> list:
    """Python values the declared type ``t`` must refuse."""
    out = ["1", None, [1], {"a": 1}, True]
    if isinstance(t, Integer):
        out += [1.5, float("nan"), 10**5000]
        if t.minimum is not None:
            out.append(t.minimum - 1)
        if t.maximum is not None:
            out.append(t.maximum + 1)
    elif isinstance(t, Number):
        out += [math.nan, math.inf, -math.inf, 10**400, complex(1, 1)]
        if t.minimum is not None:
            out.append(t.minimum if t.min_open else t.minimum - 1)
        if t.maximum is not None:
            out.append(t.maximum if t.max_open else t.maximum + 1)
    elif isinstance(t, Flag):
        out = [1, 0, "yes", None, 0.0]
    return out


def _check_message(exc: BaseException, name: str, value):
    text = str(exc)
    assert isinstance(exc, UserError), f"{name}={value!r}: {type(exc).__name__}: {text[:300]}"
    assert name.strip("'") in text and "Received:" in text, f"{name}={value!r}: {text[:300]}"
    assert "\n" not in text and len(text) < 1000, f"{name}={value!r}: {text[:300]!r}"


@pytest.mark.parametrize("key", sorted(KEY_TYPES))
def test_every_typed_recipe_key_refuses_bad_values(key):
    from deep500lite.recipe.keys import _check_value

    assert key in RECIPE_KEYS
    for value in _python_bad(KEY_TYPES[key]):
        if key == "microbatches" and value is None:
            continue  # None: no micro-batching
        with pytest.raises(Exception) as info:
            _check_value(key, value)
        _check_message(info.value, key, value)


@pytest.mark.parametrize("key", ["dataset", "model", "executor", "optimizer", "dataset_kwargs", "model_args"])
def test_recipe_names_and_keys_refuse_control_characters(key):
    from deep500lite.recipe.keys import _check_value, _normalize_keys

    bad = {"dataset_kwargs": {"a\nb": 1}, "model_args": "not a list"}.get(key, "name\x1b[2J")
    with pytest.raises(UserError) as info:
        _check_value(key, bad)
    _check_message(info.value, key, bad)
    with pytest.raises(UserError):
        _normalize_keys({key + "\n": 1}, "FIXED")


def _optimizer_classes():
    out = []
    for fw in ("reference", "torch", "tensorflow", "jax"):
        if fw != "reference" and not d5.is_framework_available(fw):
            continue
        module = __import__(f"deep500lite.frameworks.{fw}", fromlist=["x"])
        for name in getattr(module, "__all__", ()):
            cls = getattr(module, name)
            first = next(iter(list(inspect.signature(cls.__init__).parameters)[1:2]), "")
            if (inspect.isclass(cls) and issubclass(cls, d5.Optimizer) and not inspect.isabstract(cls)
                    and first == "executor"):  # not a wrapper of another optimizer
                hyper = [p for p in inspect.signature(cls.__init__).parameters.values()
                         if p.name in HYPERPARAMETERS or isinstance(p.default, float)]
                if hyper:
                    out.append(pytest.param(fw, cls, hyper, id=f"{fw}.{name}"))
    return out


def _executor(fw):
    net, _, out = networks.create_model("mlp", 4, classes=3, shape=(5,), seed=0)
    net.add_operation(datasets.dataset_loss("digits")([out, "label"], "loss"))
    return d5.executor(net, fw)


@pytest.mark.parametrize("fw, cls, hyper", _optimizer_classes())
def test_every_optimizer_hyperparameter_refuses_bad_values(fw, cls, hyper):
    executor = _executor(fw)
    rng = random.Random(f"{SEED}:{cls.__qualname__}")
    for p in hyper:
        declared = HYPERPARAMETERS.get(p.name)
        values = _python_bad(declared if declared is not None else Number(minimum=0))
        for value in rng.sample(values, min(4, len(values))) + [-1.0]:
            if isinstance(declared, Flag) and value == -1.0:
                value = "no"
            try:
                check_hyperparameter(p.name, value)
            except UserError:
                pass
            else:
                continue  # a value this hyperparameter takes (none of the generated ones should be)
            with pytest.raises(Exception) as info:
                cls(executor, **{p.name: value})
            _check_message(info.value, p.name, value)


def test_momentum_of_one_or_more_is_refused_everywhere():
    for value in (1.0, 5, 1e9):
        with pytest.raises(UserError, match="momentum"):
            check_hyperparameter("momentum", value)


def _model_options():
    out = []
    for model in networks.list_models():
        fn = networks.zoo._MODELS[model]
        for p in list(inspect.signature(fn).parameters.values())[4:]:
            if networks.zoo._option_type(model, p.name, p.default) is not None:
                out.append(pytest.param(model, p.name, p.default, id=f"{model}.{p.name}"))
    return out


@pytest.mark.parametrize("model, option, default", _model_options())
def test_every_model_option_refuses_bad_values(model, option, default):
    declared = networks.zoo._option_type(model, option, default)
    rng = random.Random(f"{SEED}:{model}.{option}")
    values = [v for v in _python_bad(declared) if v is not None]
    if isinstance(declared, Integer):
        values += [-1, 0, 2**40]
    for value in rng.sample(values, min(5, len(values))):
        try:
            declared.check(value, option)
        except UserError:
            pass
        else:
            continue
        with pytest.raises(Exception) as info:
            networks.create_model(model, 2, **{option: value})
        _check_message(info.value, option, value)
