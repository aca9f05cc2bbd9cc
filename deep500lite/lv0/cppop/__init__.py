"""Level 0: custom operators written in C++ or CUDA.

A C++ operator is a class written against the header ``deep500lite/deep500lite.h`` (shipped in
``deep500lite/include``; see ``docs/custom-operators.md``). :func:`compile_custom_cppop` builds it
into a shared library with the system compiler, cached by a hash of source and flags
(:mod:`.build`), and :class:`CppOp` loads that library with :mod:`ctypes` and runs it on numpy
arrays or on raw pointers (:mod:`.op`). The two error classes are defined in
:mod:`deep500lite.errors` and re-exported here.
"""

from deep500lite.errors import CompilationError, CppOpError
from deep500lite.lv0.cppop.build import (compile_custom_cppop, compile_custom_cppop_inline, default_build_dir,
                                         include_dir)
from deep500lite.lv0.cppop.op import CppOp

__all__ = [
    "CppOp",
    "CompilationError",
    "CppOpError",
    "compile_custom_cppop",
    "compile_custom_cppop_inline",
    "include_dir",
    "default_build_dir",
]
