"""C++ and CUDA custom operators: building, caching, running and failing clearly.

Each example op in tests/data/ops is compiled once per module into a temporary build folder;
expected values come from numpy formulas.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.errors import DeviceError, UserError
from deep500lite.lv0.cppop import (CompilationError, CppOp, CppOpError, compile_custom_cppop,
                                   compile_custom_cppop_inline)

OPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "ops")
N = 257  # not a multiple of a block or vector width


def _find_nvcc():
    for c in ("nvcc", os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if shutil.which(c):
            return shutil.which(c)
    return None


require_cxx = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++").split()[0]) is None
                                 and shutil.which("g++") is None, reason="needs a C++ compiler")
require_nvcc = pytest.mark.skipif(_find_nvcc() is None, reason="needs nvcc (CUDA toolkit)")
pytestmark = require_cxx


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ops"))


def vec(dtype=np.float32, n=N):
    return [d5.tensordesc(dtype, [n])]


@pytest.fixture(scope="module")
def swish(build_dir):
    op = compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), vec(), vec(), build_dir=build_dir)
    yield op
    op.close()


@pytest.fixture
def x():
    return np.random.default_rng(0).normal(0, 3, N).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Results


def test_elementwise_forward_and_backward_match_numpy(swish, x):
    y = swish.forward(x)
    assert y.dtype == np.float32 and y.shape == (N,)
    np.testing.assert_allclose(y, x * sigmoid(x.astype(np.float64)), rtol=1e-5, atol=1e-6)

    g = np.random.default_rng(1).normal(size=N).astype(np.float32)
    s = sigmoid(x.astype(np.float64))
    gx = swish.backward([g], [x], [y])
    np.testing.assert_allclose(gx, g * (s + x * s * (1 - s)), rtol=1e-5, atol=1e-6)
    # one output: a bare array is accepted for grads
    np.testing.assert_array_equal(swish.backward(g, [x], [y]), gx)


def test_call_goes_through_descriptor_checks(swish, x):
    (y,) = swish(x)
    np.testing.assert_allclose(y, x * sigmoid(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must be float32"):
        swish(x.astype(np.float64))


def test_two_input_matmul_in_float64(build_dir):
    a_desc, b_desc, c_desc = (d5.tensordesc(np.float64, s) for s in ([5, 3], [3, 4], [5, 4]))
    op = compile_custom_cppop("matmul", os.path.join(OPS, "matmul.cpp"), [a_desc, b_desc], [c_desc],
                              build_dir=build_dir)
    rng = np.random.default_rng(2)
    a, b, gc = rng.normal(size=(5, 3)), rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    c = op.forward(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)
    ga, gb = op.backward([gc], [a, b], [c])
    np.testing.assert_allclose(ga, gc @ b.T, rtol=1e-12)
    np.testing.assert_allclose(gb, a.T @ gc, rtol=1e-12)
    assert op.supports_dtype(np.float64) and not op.supports_dtype(np.float32)


def test_multiple_outputs(build_dir, x):
    op = compile_custom_cppop("sincos", os.path.join(OPS, "sincos.cpp"), vec(), vec() * 2, build_dir=build_dir)
    sin_x, cos_x = op.forward(x)
    np.testing.assert_allclose(sin_x, np.sin(x.astype(np.float64)), atol=1e-6)
    np.testing.assert_allclose(cos_x, np.cos(x.astype(np.float64)), atol=1e-6)
    rng = np.random.default_rng(3)
    gs, gc = rng.normal(size=N).astype(np.float32), rng.normal(size=N).astype(np.float32)
    gx = op.backward([gs, gc], [x], [sin_x, cos_x])
    np.testing.assert_allclose(gx, gs * np.cos(x) - gc * np.sin(x), rtol=1e-5, atol=1e-5)


def test_wrong_backward_example_is_wrong(build_dir, x):
    op = compile_custom_cppop("square_wrong_grad", os.path.join(OPS, "square_wrong_grad.cpp"), vec(), vec(),
                              build_dir=build_dir)
    y = op.forward(x)
    np.testing.assert_allclose(y, x * x, rtol=1e-6)
    g = np.ones(N, np.float32)
    gx = op.backward([g], [x], [y])
    assert not np.allclose(gx, 2 * x * g)  # the true gradient
    np.testing.assert_allclose(gx, x * g, rtol=1e-6)


def test_raw_pointer_interface_writes_in_place(swish, x):
    y = np.zeros(N, np.float32)
    swish.forward_ptrs([x.ctypes.data], [y.ctypes.data])
    np.testing.assert_allclose(y, x * sigmoid(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    g, gx = np.ones(N, np.float32), np.zeros(N, np.float32)
    swish.backward_ptrs([g.ctypes.data], [x.ctypes.data], [y.ctypes.data], [gx.ctypes.data])
    s = sigmoid(x.astype(np.float64))
    np.testing.assert_allclose(gx, s + x * s * (1 - s), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="takes 1 output pointers"):
        swish.forward_ptrs([x.ctypes.data], [])
    with pytest.raises(ValueError, match="non-NULL"):
        swish.forward_ptrs([0], [y.ctypes.data])
    with pytest.raises(TypeError, match="integer address"):
        swish.forward_ptrs([x], [y.ctypes.data])


@pytest.mark.parametrize("edited", [False, True], ids=["unchanged", "deep500lite-names"])
def test_deep500_operator_compiles_unchanged_or_with_our_names(build_dir, edited):
    with open(os.path.join(OPS, "deep500_square.cpp"), encoding="utf-8") as f:
        source = f.read()
    assert '"deep500/deep500.h"' in source and "deep500::" in source
    if edited:
        source = source.replace('"deep500/deep500.h"', '"deep500lite/deep500lite.h"')
        source = source.replace("deep500::", "deep500lite::")
    desc = [d5.tensordesc(np.float32, [4, 6])]
    op = compile_custom_cppop_inline("deep500_square", source, desc, desc, {"DTYPE": "float", "SCALE": 3},
                                     build_dir=build_dir)
    xx = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    np.testing.assert_allclose(op.forward(xx), 3 * xx * xx, rtol=1e-6)
    g = np.full((4, 6), 0.5, np.float32)
    np.testing.assert_allclose(op.backward([g], [xx], [3 * xx * xx]), 6 * xx * g, rtol=1e-6)
    assert not op.supports_cuda()


# --------------------------------------------------------------------------------------------
# Build cache

NEGATE = """#include <deep500lite/deep500lite.h>
struct Negate : deep500lite::CustomOperator {
    int n;
    explicit Negate(int n) : n(n) {}
    void forward(const float *x, float *y) { for (int i = 0; i < n; ++i) y[i] = -x[i]; }
};
D500_EXPORTED void *create_new_op(deep500lite::tensor_t *in, int, deep500lite::tensor_t *, int) {
    return new Negate(in[0].sizes[0]);
}
D500_REGISTER_OP(Negate)
"""


def _counting_compiler(folder):
    """A real compiler behind a script that logs every invocation."""
    log = os.path.join(folder, "invocations.log")
    script = os.path.join(folder, "cxx-wrapper.sh")
    with open(script, "w", encoding="utf-8") as f:
        f.write(f'#!/bin/sh\necho "$@" >> "{log}"\nexec {shutil.which("g++") or shutil.which("c++")} "$@"\n')
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)
    return script, log


def _builds(log, source):
    if not os.path.exists(log):
        return 0
    with open(log, encoding="utf-8") as f:
        return sum(1 for line in f if source in line)


def test_second_compile_is_a_cache_hit(tmp_path, x):
    compiler, log = _counting_compiler(str(tmp_path))
    source = str(tmp_path / "negate.cpp")
    with open(source, "w", encoding="utf-8") as f:
        f.write(NEGATE)
    first = compile_custom_cppop("negate", source, vec(), vec(), compiler=compiler, build_dir=tmp_path / "b")
    assert not first.from_cache and _builds(log, source) == 1
    np.testing.assert_array_equal(first.forward(x), -x)
    mtime = os.stat(first.library_path).st_mtime_ns
    second = compile_custom_cppop("negate", source, vec(), vec(), compiler=compiler, build_dir=tmp_path / "b")
    assert second.from_cache and second.library_path == first.library_path
    assert _builds(log, source) == 1
    assert os.stat(second.library_path).st_mtime_ns == mtime
    np.testing.assert_array_equal(second.forward(x), first.forward(x))


def test_changed_definition_builds_another_library(build_dir, swish, x):
    definitions = {"BETA": 2}
    op = compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), vec(), vec(), definitions, build_dir=build_dir)
    assert definitions == {"BETA": 2}  # DTYPE was not added to the caller's dict
    assert op.library_path != swish.library_path and op.source_hash != swish.source_hash
    np.testing.assert_allclose(op.forward(x), x * sigmoid(2 * x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_concurrent_builds_of_one_op_are_safe(tmp_path, x):
    results, errors = [], []

    def build():
        try:
            results.append(compile_custom_cppop_inline("negate", NEGATE, vec(), vec(), build_dir=tmp_path))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results[0].library_path == results[1].library_path
    assert [p for p in os.listdir(tmp_path) if p.endswith(".so")] == [os.path.basename(results[0].library_path)]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".build-")]
    np.testing.assert_array_equal(results[0].forward(x), -x)
    np.testing.assert_array_equal(results[1].forward(x), -x)


def test_cache_folder_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_CACHE", str(tmp_path / "cache"))
    op = compile_custom_cppop_inline("negate", NEGATE, vec(), vec())
    assert os.path.dirname(op.library_path) == str(tmp_path / "cache")


# --------------------------------------------------------------------------------------------
# Errors

BROKEN = """#include <deep500lite/deep500lite.h>
template <typename T>
class Broken : public deep500lite::CustomOperator {
public:
    void forward(const T *x, T *y) {
        y[0] = x[0] + undefined_thing;
    }
};
D500_EXPORTED void *create_new_op(deep500lite::tensor_t *, int, deep500lite::tensor_t *, int) {
    return new Broken<DTYPE>();
}
D500_REGISTER_OP(Broken<DTYPE>)
"""


def test_compile_error_names_the_error_and_quotes_the_line(build_dir):
    with pytest.raises(CompilationError) as info:
        compile_custom_cppop_inline("broken", BROKEN, vec(), vec(), build_dir=build_dir)
    err = info.value
    assert isinstance(err, UserError)
    first_line = str(err).splitlines()[0]
    assert "'broken'" in first_line and "undefined_thing" in first_line and ":6:" in first_line
    assert "y[0] = x[0] + undefined_thing;" in str(err)
    assert err.line == 6 and os.path.exists(err.source_path)
    assert "error" in err.compiler_output and err.compiler_output.strip() in str(err)


def test_missing_factory_is_a_compile_error(build_dir):
    src = BROKEN.replace("x[0] + undefined_thing", "x[0]").split("D500_EXPORTED")[0]
    src += "D500_REGISTER_OP(Broken<DTYPE>)\n"
    with pytest.raises(CompilationError, match="create_new_op"):
        compile_custom_cppop_inline("nofactory", src, vec(), vec(), build_dir=build_dir)


def test_missing_compiler_is_a_user_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "/nonexistent/bin/g++")
    with pytest.raises(UserError, match=r"(?s)/nonexistent/bin/g\+\+.*\$CXX.*install g\+\+"):
        compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), vec(), vec(), build_dir=tmp_path)
    with pytest.raises(UserError, match="nvcc"):
        compile_custom_cppop("swish", os.path.join(OPS, "swish.cu"), vec(), vec(), is_cuda=True,
                             compiler="/nonexistent/bin/nvcc", build_dir=tmp_path)
    with pytest.raises(UserError, match="is not nvcc"):
        compile_custom_cppop("swish", os.path.join(OPS, "swish.cu"), vec(), vec(), is_cuda=True,
                             compiler=shutil.which("g++") or shutil.which("c++"), build_dir=tmp_path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("desc", [d5.tensordesc(np.float32, [None, 4]), d5.tensordesc.runtime_shape(np.float32)],
                         ids=["none_dim", "runtime_shape"])
def test_non_concrete_descriptors_are_rejected(desc, tmp_path):
    with pytest.raises(ValueError, match="concrete shape"):
        compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), [desc], vec(), build_dir=tmp_path)
    with pytest.raises(ValueError, match="concrete shape"):
        compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), vec(), [desc], build_dir=tmp_path)


def test_bad_arguments_are_refused_before_compiling(tmp_path):
    src = os.path.join(OPS, "swish.cpp")
    with pytest.raises(UserError, match="not found"):
        compile_custom_cppop("swish", tmp_path / "missing.cpp", vec(), vec(), build_dir=tmp_path)
    with pytest.raises(ValueError, match="name"):
        compile_custom_cppop("my op/1", src, vec(), vec(), build_dir=tmp_path)
    with pytest.raises(TypeError, match="list of d5.tensordesc"):
        compile_custom_cppop("swish", src, d5.tensordesc(np.float32, [4]), vec(), build_dir=tmp_path)
    with pytest.raises(TypeError, match="additional_definitions"):
        compile_custom_cppop("swish", src, vec(), vec(), ["BETA=2"], build_dir=tmp_path)
    with pytest.raises(ValueError, match="C identifiers"):
        compile_custom_cppop("swish", src, vec(), vec(), {"2BAD": 1}, build_dir=tmp_path)
    with pytest.raises(TypeError, match="extra_flags"):
        compile_custom_cppop("swish", src, vec(), vec(), extra_flags="-O2", build_dir=tmp_path)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".so")]


def test_wrong_dtype_for_the_compiled_class_is_refused(build_dir):
    with pytest.raises(UserError, match="double pointer, but that tensor is float32"):
        compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), vec(), vec(), {"DTYPE": "double"},
                             build_dir=build_dir)


def test_wrong_number_of_descriptors_is_refused(build_dir):
    with pytest.raises(UserError, match=r"forward\(\) takes 2 pointer arguments.*need 3"):
        compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), vec() * 2, vec(), build_dir=build_dir)


def test_wrong_shapes_are_refused_before_cpp_runs(swish, x):
    with pytest.raises(ValueError, match=r"input 0 must have shape \[257\]"):
        swish.forward(x[:-1])
    with pytest.raises(ValueError, match="takes 1 inputs"):
        swish.forward(x, x)
    with pytest.raises(ValueError, match=r"forward output 0 must have shape"):
        swish.backward([x], [x], [x[:3]])
    with pytest.raises(TypeError, match="must be float32"):
        swish.forward(np.ones(N, np.complex64))
    # same kind, another width: converted
    np.testing.assert_allclose(swish.forward(x.astype(np.float64)), swish.forward(x))
    np.testing.assert_allclose(swish.forward(np.asfortranarray(x[::-1])[::-1]), swish.forward(x))


THROWING = """#include <deep500lite/deep500lite.h>
#include <stdexcept>
class Picky : public deep500lite::CustomOperator {
public:
    void forward(const float *x, float *y) {
        if (x[0] < 0) throw std::domain_error("Picky wants x[0] >= 0");
        y[0] = 2 * x[0];
    }
};
D500_EXPORTED void *create_new_op(deep500lite::tensor_t *in, int, deep500lite::tensor_t *, int) {
    if (in[0].dims != 1 || in[0].sizes[0] != 1) throw std::invalid_argument("Picky takes one element");
    return new Picky();
}
D500_REGISTER_OP(Picky)
"""


def test_cpp_exceptions_become_python_exceptions(build_dir):
    one = [d5.tensordesc(np.float32, [1])]
    op = compile_custom_cppop_inline("picky", THROWING, one, one, build_dir=build_dir)
    with pytest.raises(CppOpError, match="forward threw: Picky wants x"):
        op.forward(np.array([-1], np.float32))
    np.testing.assert_array_equal(op.forward(np.array([3], np.float32)), [6])  # still usable
    with pytest.raises(NotImplementedError, match="no backward"):
        op.backward([np.ones(1, np.float32)], [np.ones(1, np.float32)], [np.ones(1, np.float32)])
    assert not op.has_backward
    two = [d5.tensordesc(np.float32, [2])]
    with pytest.raises(CppOpError, match="create_new_op threw: Picky takes one element"):
        compile_custom_cppop_inline("picky", THROWING, two, two, build_dir=build_dir)


def test_closed_op_refuses_calls(build_dir, x):
    op = compile_custom_cppop("swish", os.path.join(OPS, "swish.cpp"), vec(), vec(), build_dir=build_dir)
    op.close()
    op.close()
    with pytest.raises(ValueError, match="closed"):
        op.forward(x)


def test_cpu_only_op_has_no_cuda(swish, x):
    assert not swish.supports_cuda() and not swish.compiled_with_cuda
    with pytest.raises(NotImplementedError, match="forward_cuda"):
        swish.forward_ptrs([x.ctypes.data], [x.ctypes.data], cuda=True)


def test_loading_a_library_without_entry_points(tmp_path):
    src = tmp_path / "plain.cpp"
    src.write_text('extern "C" int f() { return 1; }\n')
    lib = tmp_path / "plain.so"
    cxx = shutil.which("g++") or shutil.which("c++")
    import subprocess
    subprocess.run([cxx, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    with pytest.raises(UserError, match="D500_REGISTER_OP"):
        CppOp("plain", lib, vec(), vec())


# --------------------------------------------------------------------------------------------
# CUDA


@pytest.fixture(scope="module")
def swish_cuda(build_dir):
    op = compile_custom_cppop("swish_cuda", os.path.join(OPS, "swish.cu"), vec(), vec(), is_cuda=True,
                              build_dir=build_dir)
    yield op
    op.close()


@require_nvcc
def test_cuda_op_compiles_with_nvcc(swish_cuda, x):
    assert swish_cuda.compiled_with_cuda and swish_cuda.supports_cuda()
    np.testing.assert_allclose(swish_cuda.forward(x), x * sigmoid(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@require_nvcc
def test_cuda_call_without_gpu_is_refused(swish_cuda, x):
    if swish_cuda.cuda_device_count() > 0:
        pytest.skip("a CUDA GPU is present (test_cuda_op_runs_on_gpu covers it)")
    with pytest.raises(DeviceError, match="needs a CUDA GPU"):
        swish_cuda.forward_ptrs([x.ctypes.data], [x.ctypes.data], cuda=True)
    with pytest.raises(DeviceError, match="needs a CUDA GPU"):
        swish_cuda.forward_cuda(x)


@require_nvcc
@pytest.mark.gpu
def test_cuda_op_runs_on_gpu(swish_cuda, x):
    if swish_cuda.cuda_device_count() == 0:
        pytest.skip("needs a CUDA GPU")
    y = swish_cuda.forward_cuda(x)
    np.testing.assert_allclose(y, x * sigmoid(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    g = np.random.default_rng(4).normal(size=N).astype(np.float32)
    s = sigmoid(x.astype(np.float64))
    np.testing.assert_allclose(swish_cuda.backward_cuda([g], [x], [y]), g * (s + x * s * (1 - s)),
                               rtol=1e-5, atol=1e-6)
