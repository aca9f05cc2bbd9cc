"""Declared value types: one layer that parses every command-line option and checks every recipe value.

A type says what a value must be (an integer from 1 to 4,096 that is a power of two, a finite
number of seconds > 0, a size in bytes, a non-empty path, a list of known names, ...). The same
object is used two ways:

- as an argparse ``type=``: ``parser.add_argument("--factor", type=Integer(minimum=2))``. A bad
  value is one usage line that names the option (argparse adds ``argument --factor:``), says what
  is allowed and what was received, and exits with status 2;
- as a check of a Python value: ``Integer(minimum=0, maximum=MAX_EPOCHS).check(value, "epochs")``
  (a recipe key, a keyword argument, a public function's parameter) raises a
  :class:`~deep500lite.errors.UserError` naming ``epochs`` (a value of the wrong kind:
  :class:`~deep500lite.errors.UserTypeError`).

Every type also declares what it accepts as attributes (``minimum``, ``maximum``,
``power_of_two``, ``choices``, ...), so the bad-input generator of the test suite
(``tests/reliability/test_generated_options.py``) derives wrong values for every option of every
command from the parser alone. Text of any kind refuses control characters (a newline, an ANSI
escape, a NUL byte): no option or recipe key needs one.

This module is a leaf: it imports only :mod:`deep500lite.errors`.
"""

from __future__ import annotations

import argparse
import math
import numbers
import re

from deep500lite.errors import UserError, UserTypeError, format_choices

__all__ = ["ValueType", "Integer", "Number", "Size", "Text", "Path", "Choice", "ListOf", "Sweep", "Flag", "Parsed",
           "OneOf", "positive_int", "nonnegative_int", "positive_seconds", "seed", "SEED_MAX", "MAX_TEXT",
           "check_no_control", "short"]

#: The largest seed: numpy, torch, TensorFlow and JAX all take seeds below 2**32.
SEED_MAX = 2**32 - 1
#: The longest text option or recipe string accepted (a path, a label, a name).
MAX_TEXT = 4096
# Characters no option, key or path holds (what deep500lite.escaping.terminal would escape).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def short(value, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (an integer with thousands of digits stays readable)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user object whose repr fails (or an int past the digit limit)
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_no_control(text: str, name: str, what: str = "") -> str:
    """``text`` unchanged, or a :class:`UserError` naming ``name`` when it holds a control character."""
    found = _CONTROL.search(text)
    if found:
        raise UserError(f"{name} must not contain control characters (a newline, tab, escape or NUL byte){what}. "
                        f"Received: {short(text)}")
    return text


class ValueType:
    """A declared type: :meth:`parse` reads command-line text, :meth:`check` checks a Python value.

    Subclasses set :attr:`kind` (the bad-input generator's key) and implement :meth:`parse`,
    :meth:`check` and :meth:`describe`. Calling the object is argparse's ``type=`` protocol: a
    :class:`UserError` becomes ``argparse.ArgumentTypeError``, which argparse prints after the
    option's name.
    """

    kind = "text"

    def parse(self, text: str):
        """The value of command-line ``text``; raises :class:`UserError` for a bad one."""
        raise NotImplementedError

    def check(self, value, name: str):
        """``value`` (a Python object) checked, returned normalized; the error names ``name``."""
        raise NotImplementedError

    def describe(self) -> str:
        """What is allowed, as the end of "must be ...": ``an integer from 1 to 64``."""
        raise NotImplementedError

    def __call__(self, text):
        try:
            return self.parse(text)
        except UserError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    @property
    def __name__(self) -> str:  # argparse names the type in messages it writes itself
        return type(self).__name__.lower()

    def _refuse(self, received: str, name: str = "") -> UserError:
        who = f"{name} " if name else ""
        return UserError(f"{who}must be {self.describe()}. Received: {received}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r})"


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Integer(ValueType):
    """A whole number in ``[minimum, maximum]``, optionally a power of two or a multiple of ``multiple_of``.

    Args:
        minimum: the smallest allowed (None: no bound).
        maximum: the largest allowed (None: no bound; text longer than 40 digits is refused anyway).
        power_of_two: only 1, 2, 4, 8, ...
        multiple_of: only multiples of this.
        wording: what is allowed, in words, instead of the generated description.
    """

    kind = "integer"

    def __init__(self, minimum: int | None = None, maximum: int | None = None, *, power_of_two: bool = False,
                 multiple_of: int | None = None, wording: str | None = None):
        self.minimum, self.maximum, self.power_of_two = minimum, maximum, power_of_two
        self.multiple_of, self.wording = multiple_of, wording

    def describe(self) -> str:
        if self.wording:
            return self.wording
        what = "a power of two" if self.power_of_two else "an integer"
        if self.multiple_of:
            what += f", a multiple of {self.multiple_of},"
        if self.minimum is not None and self.maximum is not None:
            return f"{what} from {self.minimum:,} to {self.maximum:,}"
        if self.minimum is not None:
            return f"{what} >= {self.minimum:,}"
        if self.maximum is not None:
            return f"{what} <= {self.maximum:,}"
        return what

    def _ok(self, value: int) -> bool:
        return ((self.minimum is None or value >= self.minimum) and (self.maximum is None or value <= self.maximum)
                and (not self.power_of_two or (value > 0 and value & (value - 1) == 0))
                and (not self.multiple_of or value % self.multiple_of == 0))

    def parse(self, text: str) -> int:
        text = str(text)
        value = None
        if len(text.strip()) <= 40:
            try:
                value = int(text)
            except ValueError:
                value = None
        if value is None or not self._ok(value):
            raise self._refuse(short(text))
        return value

    def check(self, value, name: str) -> int:
        if not _is_int(value):
            raise UserTypeError(f"{name} must be {self.describe()}. Received: {type(value).__name__} {short(value)}")
        if not self._ok(int(value)):
            raise self._refuse(short(value), name)
        return int(value)


class Number(ValueType):
    """A finite real number in a range (``nan`` and ``inf`` are always refused).

    Args:
        minimum, maximum: the bounds (None: none).
        min_open, max_open: the bound itself is excluded (``> 0`` rather than ``>= 0``).
        unit: what the number counts, for messages (``seconds``).
        wording: what is allowed, in words, instead of the generated description.
    """

    kind = "number"

    def __init__(self, minimum: float | None = None, maximum: float | None = None, *, min_open: bool = False,
                 max_open: bool = False, unit: str = "", wording: str | None = None):
        self.minimum, self.maximum, self.min_open, self.max_open = minimum, maximum, min_open, max_open
        self.unit, self.wording = unit, wording

    def describe(self) -> str:
        if self.wording:
            return self.wording
        what = "a finite number" + (f" of {self.unit}" if self.unit else "")
        bounds = []
        if self.minimum is not None:
            bounds.append(f"{'>' if self.min_open else '>='} {self.minimum:g}")
        if self.maximum is not None:
            bounds.append(f"{'<' if self.max_open else '<='} {self.maximum:g}")
        return what + (" " + " and ".join(bounds) if bounds else "")

    def _ok(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.minimum is not None and (value <= self.minimum if self.min_open else value < self.minimum):
            return False
        if self.maximum is not None and (value >= self.maximum if self.max_open else value > self.maximum):
            return False
        return True

    def parse(self, text: str) -> float:
        text = str(text)
        try:
            value = float(text) if len(text) <= 100 else math.nan
        except ValueError:
            value = math.nan
        if not self._ok(value):
            raise self._refuse(short(text))
        return value

    def check(self, value, name: str) -> float:
        if not _is_number(value):
            raise UserTypeError(f"{name} must be {self.describe()}. Received: {type(value).__name__} {short(value)}")
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.inf
        if not self._ok(number):
            raise self._refuse(short(value), name)
        return number


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


class Size(Integer):
    """A size in bytes: a whole number with an optional unit B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024).

    Takes :class:`Integer`'s bounds, in bytes.
    """

    kind = "size"

    def describe(self) -> str:
        if self.wording:
            return self.wording
        parts = ["a size in bytes (4, 64KiB, 256MiB)"]
        if self.multiple_of:
            parts.append(f"a multiple of {self.multiple_of}")
        if self.power_of_two:
            parts.append("a power of two")
        if self.minimum is not None:
            parts.append(f"at least {_bytes(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"at most {_bytes(self.maximum)}")
        return ", ".join(parts)

    def parse(self, text: str) -> int:
        m = re.fullmatch(r"\s*(\d{1,20})\s*([a-zA-Z]{0,3})\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise self._refuse(short(str(text)))
        value = int(m.group(1)) * _UNITS[m.group(2).lower()]
        if not self._ok(value):
            raise self._refuse(short(str(text)))
        return value


def _bytes(n: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n} bytes"


class Text(ValueType):
    """Text without control characters, at most ``max_length`` characters; empty only if ``allow_empty``.

    Args:
        allow_empty: accept ``""``.
        max_length: the longest accepted.
        pattern: a regular expression the whole text must match (with ``wording`` saying what it means).
        wording: what is allowed, in words.
    """

    kind = "text"

    def __init__(self, *, allow_empty: bool = False, max_length: int = MAX_TEXT, pattern: str | None = None,
                 wording: str | None = None):
        self.allow_empty, self.max_length = allow_empty, max_length
        self.pattern = re.compile(pattern) if pattern else None
        self.wording = wording

    def describe(self) -> str:
        if self.wording:
            return self.wording
        return (f"{'text' if self.allow_empty else 'non-empty text'} of at most {self.max_length:,} characters, "
                "without control characters")

    def _text(self, text: str, name: str) -> str:
        if not text and not self.allow_empty:
            raise self._refuse("''", name)
        if len(text) > self.max_length:
            raise UserError(f"{name + ' ' if name else ''}must be at most {self.max_length:,} characters. Received: "
                            f"{len(text):,} characters ({short(text, 40)})")
        check_no_control(text, name or "the value")
        if self.pattern is not None and not self.pattern.fullmatch(text):
            raise self._refuse(short(text), name)
        return text

    def parse(self, text: str) -> str:
        return self._text(str(text), "")

    def check(self, value, name: str) -> str:
        if not isinstance(value, str):
            raise UserTypeError(f"{name} must be {self.describe()}. Received: {type(value).__name__} {short(value)}")
        return self._text(value, name)


class Path(Text):
    """A file or folder path: non-empty, no NUL byte or other control character, at most 4,096 characters.

    When the path already exists, what it is must fit its role, checked with ``os.stat`` as the
    option is parsed (nothing is opened, so a FIFO never blocks here): an input that is a FIFO, a
    device or a socket, an output that is a folder, a folder that is a file are refused at once,
    naming the option. A missing input is left to the command, which says what it expected there;
    :mod:`deep500lite.input_files` checks every input again when it is read.

    Args:
        role: ``"input"`` (a file that is read), ``"input-or-folder"`` (a file, or a folder of
            files), ``"input-or-name"`` (a file, a folder or a bundled name, such as a recipe),
            ``"program"`` (an executable file or a name on PATH), ``"output"`` (a file that is
            written; ``/dev/null``, ``/dev/stdout`` and ``/dev/stderr`` are allowed), ``"folder"``
            (a folder read or written).
    """

    kind = "path"
    ROLES = ("input", "input-or-folder", "input-or-name", "program", "output", "folder")
    #: Special files an output may name.
    STREAMS = ("/dev/null", "/dev/stdout", "/dev/stderr")

    def __init__(self, role: str = "input"):
        super().__init__()
        if role not in self.ROLES:
            raise ValueError(f"role must be one of {self.ROLES}. Received: {role!r}")
        self.role = role

    def describe(self) -> str:
        what = {"input": "a regular file", "input-or-folder": "a regular file or a folder",
                "input-or-name": "a name, a regular file or a folder", "program": "an executable file or a name",
                "output": "the path of a file to write (not a folder)", "folder": "a folder path (not a file)"}
        return f"{what[self.role]}: a non-empty path without control characters, at most 4,096 characters"

    def parse(self, text: str) -> str:
        text = super().parse(text)
        self.check_kind(text)
        return text

    def check_kind(self, text: str) -> None:
        """Refuse an existing ``text`` that is not what :attr:`role` allows (see the class documentation)."""
        import os
        import stat

        try:
            mode = os.stat(text).st_mode
        except (OSError, ValueError):
            mode = None
        if mode is None:
            parent = os.path.dirname(os.path.abspath(text))
            if self.role in ("output", "folder") and os.path.exists(parent) and not os.path.isdir(parent):
                raise UserError(f"{short(parent)} is a file, not a folder, so nothing can be written inside it. "
                                f"Received: {short(text)}")
            return
        kind = ("a folder" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode)
                else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                else "a block device" if stat.S_ISBLK(mode) else "a socket")
        allowed = {"input": ("a regular file",), "program": ("a regular file",),
                   "input-or-folder": ("a regular file", "a folder"), "input-or-name": ("a regular file", "a folder"),
                   "output": ("a regular file",), "folder": ("a folder",)}[self.role]
        if kind in allowed or (self.role == "output" and os.path.realpath(text) in
                               {os.path.realpath(s) for s in self.STREAMS}) or text in self.STREAMS:
            return
        why = "" if kind in ("a folder", "a regular file") else "; a pipe or a device may block or never end"
        if self.role == "folder":
            what = "a file, not a folder" if kind == "a regular file" else f"{kind}, not a folder"
        elif self.role == "output":
            what = f"{kind}, not a file to write"
        else:
            what = f"{kind}, not a regular file" + (" or a folder" if "a folder" in allowed else "")
        raise UserError(f"{short(text)} is {what}{why}; give {' or '.join(allowed)}. Received: {short(text)}")


class Choice(ValueType):
    """One of ``choices`` (compared exactly, or lower-cased with ``case_insensitive``)."""

    kind = "choice"

    def __init__(self, choices, *, case_insensitive: bool = False):
        self.choices = tuple(choices)
        self.case_insensitive = case_insensitive

    def describe(self) -> str:
        return f"one of {format_choices(self.choices)}"

    def _find(self, value):
        if value in self.choices:
            return value
        if self.case_insensitive and isinstance(value, str):
            for c in self.choices:
                if str(c).lower() == value.lower():
                    return c
        raise self._refuse(short(value))

    def parse(self, text: str):
        return self._find(str(text))

    def check(self, value, name: str):
        try:
            return self._find(value)
        except UserError:
            raise self._refuse(short(value), name) from None


class ListOf(ValueType):
    """A ``separator``-separated list of ``item`` values (command line), or a list or tuple of them (Python).

    Args:
        item: the type of each element.
        separator: the separator on the command line.
        min_items, max_items: how many elements are allowed.
        unique: refuse an element given twice.
    """

    kind = "list"

    def __init__(self, item: ValueType, *, separator: str = ",", min_items: int = 1, max_items: int | None = None,
                 unique: bool = False):
        self.item, self.separator, self.min_items, self.max_items = item, separator, min_items, max_items
        self.unique = unique

    def describe(self) -> str:
        count = ""
        if self.max_items is not None and self.max_items == self.min_items:
            count = f"{self.min_items} "
        elif self.min_items > 1:
            count = f"at least {self.min_items} "
        sep = "comma" if self.separator == "," else repr(self.separator)
        return f"a {sep}-separated list of {count}values, each {self.item.describe()}"

    def _items(self, values: list, name: str, received: str) -> list:
        if len(values) < self.min_items or (self.max_items is not None and len(values) > self.max_items):
            raise self._refuse(received, name)
        if self.unique and len(set(map(repr, values))) != len(values):
            raise UserError(f"{name + ' ' if name else ''}must not name an element twice. Received: {received}")
        return values

    def parse(self, text: str) -> list:
        text = str(text)
        check_no_control(text, "the value")
        parts = [p.strip() for p in text.split(self.separator)] if text.strip() else []
        out = []
        for i, part in enumerate(parts):
            try:
                out.append(self.item.parse(part))
            except UserError as exc:
                raise UserError(f"element {i + 1} of {short(text)}: {exc}") from None
        return self._items(out, "", short(text))

    def check(self, value, name: str) -> list:
        if not isinstance(value, (list, tuple)):
            raise UserTypeError(f"{name} must be a list or tuple of values, each {self.item.describe()}. Received: "
                                f"{type(value).__name__} {short(value)}")
        out = [self.item.check(v, f"{name}[{i}]") for i, v in enumerate(value)]
        return self._items(out, name, short(value))


class Sweep(ValueType):
    """Counts to sweep: ``LOW..HIGH`` (every ``item`` value in between: with a power-of-two item, the
    powers of two), a comma-separated list, or one value; at most ``max_points`` of them."""

    kind = "sweep"

    def __init__(self, item: Integer, *, max_points: int = 64):
        self.item, self.max_points = item, max_points

    def describe(self) -> str:
        return (f"LOW..HIGH, a comma-separated list or one value, each {self.item.describe()}, LOW <= HIGH, "
                f"at most {self.max_points} values")

    def parse(self, text: str) -> list:
        text = str(text).strip()
        check_no_control(text, "the value")
        if ".." in text:
            low_text, _, high_text = text.partition("..")
            low, high = self.item.parse(low_text), self.item.parse(high_text)
            if low > high:
                raise self._refuse(short(text))
            if self.item.power_of_two:
                values, v = [], low
                while v <= high and len(values) <= self.max_points:
                    values.append(v)
                    v *= 2
            else:
                values = list(range(low, min(high, low + self.max_points) + 1))
        else:
            values = ListOf(self.item).parse(text)
        if len(values) > self.max_points:
            raise self._refuse(short(text))
        return values

    def check(self, value, name: str) -> list:
        values = ListOf(self.item, max_items=self.max_points).check(value, name)
        return values


class Flag(ValueType):
    """A boolean: ``True``/``False`` in Python; on the command line ``true``/``false``, ``yes``/``no``, ``1``/``0``."""

    kind = "flag"
    _WORDS = {"true": True, "yes": True, "1": True, "on": True, "false": False, "no": False, "0": False, "off": False}

    def describe(self) -> str:
        return "True or False"

    def parse(self, text: str) -> bool:
        value = self._WORDS.get(str(text).strip().lower())
        if value is None:
            raise self._refuse(short(text))
        return value

    def check(self, value, name: str) -> bool:
        if isinstance(value, bool):
            return value
        if hasattr(value, "dtype") and getattr(value, "shape", None) == () and str(value.dtype) == "bool":
            return bool(value)
        raise UserTypeError(f"{name} must be True or False. Received: {type(value).__name__} {short(value)}")


class Parsed(ValueType):
    """A type given by a parsing function ``fn(text) -> value`` that raises :class:`UserError`.

    For values whose grammar is the command's own (a network name or an ``ALPHA,BANDWIDTH`` pair);
    control characters are refused before ``fn`` sees the text.

    Args:
        fn: the parser.
        wording: what is allowed, in words.
        kind: the generator's key for the value (``"text"`` unless another fits better).
        keep_text: ``fn`` only checks: the option's value stays the text (for a command that parses
            it again where it is used).
    """

    def __init__(self, fn, wording: str, kind: str = "text", *, keep_text: bool = False):
        self.fn, self.wording, self.kind, self.keep_text = fn, wording, kind, keep_text

    def describe(self) -> str:
        return self.wording

    def parse(self, text: str):
        text = str(text)
        if len(text) > MAX_TEXT:
            raise UserError(f"must be at most {MAX_TEXT:,} characters. Received: {len(text):,} characters")
        check_no_control(text, "the value")
        value = self.fn(text)
        return text if self.keep_text else value

    def check(self, value, name: str):
        if not isinstance(value, str):
            raise UserTypeError(f"{name} must be {self.wording}. Received: {type(value).__name__} {short(value)}")
        return self.parse(value)


class OneOf(ValueType):
    """The first of ``types`` that accepts the value (``auto`` or a size, a name or a pair of numbers)."""

    kind = "one-of"

    def __init__(self, *types: ValueType):
        self.types = types

    def describe(self) -> str:
        return " or ".join(t.describe() for t in self.types)

    def parse(self, text: str):
        for t in self.types:
            try:
                return t.parse(text)
            except UserError:
                continue
        raise self._refuse(short(str(text)))

    def check(self, value, name: str):
        for t in self.types:
            try:
                return t.check(value, name)
            except UserError:
                continue
        raise self._refuse(short(value), name)


#: An integer >= 1 (counts, batch sizes, ranks).
positive_int = Integer(minimum=1, wording="a positive integer (1, 2, 3, ...)")
#: An integer >= 0.
nonnegative_int = Integer(minimum=0, wording="an integer >= 0 (0, 1, 2, ...)")
#: A seed: an integer from 0 to 2**32 - 1.
seed = Integer(minimum=0, maximum=SEED_MAX, wording=f"an integer from 0 to {SEED_MAX:,} (2**32 - 1)")
#: A time limit: a finite number of seconds > 0.
positive_seconds = Number(minimum=0, min_open=True, wording="a finite number of seconds > 0 (0.5, 2, 60)")
