"""Declared factories: the only functions deep500lite calls when a user names one by text.

A recipe may name a component by an import path (``"optimizer": "mypkg.opt.LARS"``), and
``bench overhead --op`` / ``bench op --custom-op`` take ``FILE.py:NAME`` or ``MODULE:NAME``. Text
like this could name any importable callable (``os:getcwd``, ``shutil.rmtree``); deep500lite calls
what it names only when it is declared for that use:

- a class of the expected kind (a :class:`~deep500lite.Optimizer`, a
  :class:`~deep500lite.Sampler`, a distributed optimizer, a training event), which is built; or
- a function marked with :func:`factory` (``@d5.factory``), which is called.

Anything else is refused in one line that names it and says how to declare it. Components given
as Python objects inside a recipe file (``"optimizer": MyOptimizer``) are the recipe's own code
and need no mark.

>>> import deep500lite as d5
>>> @d5.factory
... def make_op():
...     ...
>>> d5.is_factory(make_op)
True
"""

from __future__ import annotations

import inspect

from deep500lite.errors import UserError

__all__ = ["factory", "is_factory", "declared_callable"]

_MARK = "__deep500lite_factory__"


def factory(fn=None):
    """Mark ``fn`` as a factory deep500lite may call when a user names it by text (an import path,
    ``FILE.py:NAME``). Use as ``@d5.factory``; returns ``fn`` unchanged apart from the mark.

    Raises:
        UserError: ``fn`` is not callable.
    """
    def mark(f):
        if not callable(f):
            raise UserError(f"d5.factory marks a function or class. Received: {type(f).__name__}")
        try:
            setattr(f, _MARK, True)
        except (AttributeError, TypeError):
            raise UserError(f"d5.factory cannot mark {f!r} (a built-in); wrap it in a function of your own. "
                            f"Received: {type(f).__name__}") from None
        return f

    return mark if fn is None else mark(fn)


def is_factory(obj) -> bool:
    """Whether ``obj`` was marked with :func:`factory`."""
    return bool(inspect.getattr_static(obj, _MARK, False)) if obj is not None else False


def declared_callable(obj, text: str, what: str, bases: tuple = ()):
    """``obj`` (found by the user's ``text``) if deep500lite may call it: a subclass of one of ``bases``
    or a function marked with :func:`factory`.

    Args:
        obj: what ``text`` resolved to.
        text: the name the user gave (for the message).
        what: what it should be (``"optimizer"``, ``"--op"``).
        bases: the classes an acceptable class derives from.

    Raises:
        UserError: anything else that is callable (a plain function, a built-in, a class of another kind).
    """
    if inspect.isclass(obj) and bases and issubclass(obj, bases):
        return obj
    if is_factory(obj):
        return obj
    kind = "class" if inspect.isclass(obj) else "built-in" if inspect.isbuiltin(obj) else type(obj).__name__
    expected = " or ".join(f"a {b.__name__} subclass" for b in bases)
    raise UserError(f"{what} {text!r} names a {kind} that is not declared for this use: deep500lite calls, by name, "
                    f"only {expected + ' or ' if expected else ''}a function marked with @d5.factory (import "
                    f"deep500lite as d5). Mark your factory, or pass the object itself from Python. Received: {text!r}")
