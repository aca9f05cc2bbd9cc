"""``deep500lite bench op``: the small suite runs and its numbers follow from the raw samples and sizes.

No timing is asserted: the tests recompute GFLOP/s, the roofline placement and the peak figures
from the raw samples in the JSON file and from the case sizes, and check every case and framework
is in the table.
"""

import csv
import io
import json

import numpy as np
import pytest

import deep500lite as d5
from support import run_cli
from deep500lite.bench import op
from deep500lite.perfmodel.peak import Peak, roofline
from deep500lite.errors import DeviceError, UserError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FRAMEWORKS = ["reference"] + [f for f in ("torch", "onnxruntime") if d5.is_framework_available(f)]

# The small presets, written out here so the FLOP and byte counts below do not come from the code under test.
SMALL_GEMM = {"square-128": (128, 128, 128), "deepbench-like": (256, 32, 256), "skinny-b4": (512, 4, 512)}
SMALL_CONV = {"tiny-3x3": (1, 8, 16, 16, 16, 3, 3, 1, 1), "tiny-1x1-s2": (1, 16, 14, 14, 8, 1, 1, 2, 0)}


def _flops_bytes(suite, name):
    if suite == "gemm":
        m, n, k = SMALL_GEMM[name]
        return 2 * m * n * k, 4 * (m * k + k * n + m * n)
    if suite == "conv":
        n, c, h, w, k, r, s, stride, pad = SMALL_CONV[name]
        p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
        return 2 * n * k * c * r * s * p * q, 4 * (n * c * h * w + k * c * r * s + n * k * p * q)
    length = 1 << 16  # saxpy: z = 2 x + y on float32 vectors
    return 2 * length, 12 * length


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_op")
    out, plots = folder / "op.json", folder / "plots"
    proc = run_cli("bench", "op", "--size", "small", "--suite", "gemm,conv,custom", "--frameworks",
                   ",".join(FRAMEWORKS), "--max-time", "0.05", "--format", "csv", "--json", out, "--plot", plots)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(out.read_text()), plots


def test_table_has_every_case_and_framework(small_run):
    proc, _, _ = small_run
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))  # stdout is the CSV alone; the rest went to stderr
    got = {(r["suite"], r["case"], r["framework"]) for r in rows}
    want = {("gemm", c, f) for c in SMALL_GEMM for f in FRAMEWORKS}
    want |= {("conv", c, f) for c in SMALL_CONV for f in FRAMEWORKS}
    want |= {("custom", "saxpy-65536", "op")}
    assert got == want
    assert len(rows) == len(want)
    assert "peak compute:" in proc.stderr and "peak bandwidth:" in proc.stderr


def test_gflops_and_roofline_follow_from_sizes_and_samples(small_run):
    proc, data, _ = small_run
    rows = {(r["case"], r["framework"]): r for r in csv.DictReader(io.StringIO(proc.stdout))}
    peak = data["peak"]
    ridge = peak["flops"] / peak["bandwidth"]
    bounds = set()
    for res in data["results"]:
        flops, nbytes = _flops_bytes(res["suite"], res["case"]["name"])
        raw = res["measurement"]["raw"]
        median = float(np.median(raw))
        assert res["median_s"] == pytest.approx(median, rel=1e-12)
        row = rows[(res["case"]["name"], res["framework"])]
        assert int(row["runs"]) == len(raw) >= 3
        assert float(row["GFLOP/s"]) == pytest.approx(flops / median / 1e9, rel=1e-3)
        intensity = flops / nbytes
        assert float(row["FLOP/B"]) == pytest.approx(intensity, rel=1e-2)
        bound = "memory" if intensity < ridge else "compute"
        assert row["bound"] == bound
        bounds.add(bound)
        attainable = min(peak["flops"], intensity * peak["bandwidth"])
        assert float(row["% attainable"]) == pytest.approx(100 * flops / median / attainable, rel=1e-3, abs=0.051)
        assert float(row["% peak"]) == pytest.approx(100 * flops / median / peak["flops"], rel=1e-3, abs=0.051)
        if res["max_rel_error"] is not None:
            assert res["max_rel_error"] < 1e-4, res  # every framework computed the same product
    assert bounds == {"memory", "compute"}  # the small suite has both kinds (saxpy, 1x1 conv vs square GEMM)


def test_peak_is_the_best_measured_kernel(small_run):
    _, data, _ = small_run
    peak = data["peak"]
    rates = {name: k["work"] / min(k["measurement"]["raw"]) for name, k in peak["kernels"].items()}  # best run
    assert "gemm_numpy" in rates and "stream_copy_numpy" in rates and "stream_add_numpy" in rates
    assert peak["flops"] == pytest.approx(max(v for k, v in rates.items() if k.startswith("gemm")), rel=1e-9)
    assert peak["bandwidth"] == pytest.approx(max(v for k, v in rates.items() if k.startswith("stream")), rel=1e-9)
    assert str(2048) in peak["flops_method"] and "64 MiB" in peak["bandwidth_method"]


def test_json_and_plots(small_run):
    proc, data, plots = small_run
    assert data["benchmark"] == "op" and data["settings"]["size"] == "small"
    assert data["environment"]["cpu"]["logical_cores"] >= 1
    assert all(len(r["measurement"]["raw"]) >= 3 for r in data["results"])
    assert set(data["framework_setup"]) == {*FRAMEWORKS, "op"}
    for suite in ("gemm", "conv", "custom"):
        png = plots / f"op-{suite}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert str(png) in proc.stderr


def test_roofline_on_both_sides_of_the_ridge():
    peak = Peak("cpu", flops=100e9, bandwidth=10e9, flops_method="", bandwidth_method="", kernels={})
    low = roofline(flops=2e6, bytes_moved=1e6, seconds=1e-3, peak=peak)  # 2 FLOP/B < ridge 10
    assert (low.intensity, low.bound, low.attainable) == (2.0, "memory", 20e9)
    assert low.fraction_of_attainable == pytest.approx(2e9 / 20e9) and low.fraction_of_peak == pytest.approx(0.02)
    high = roofline(flops=50e6, bytes_moved=1e6, seconds=1e-3, peak=peak)  # 50 FLOP/B > ridge
    assert (high.bound, high.attainable) == ("compute", 100e9)
    assert high.fraction_of_attainable == pytest.approx(0.5)
    assert roofline(10e6, 1e6, 1e-3, peak).bound == "compute"  # exactly at the ridge


@pytest.mark.parametrize("call, message", [
    (lambda: op.parse_suites("gemm,fft"), "--suite takes a comma-separated list of 'gemm', 'conv', 'skinny', 'custom'. "
                                          "Received: 'gemm,fft' (unknown: 'fft')"),
    # the built-in frameworks first, then any plugin's
    (lambda: op.parse_frameworks("torch,caffe"), "--frameworks takes a comma-separated list of 'reference', "
                                                 "'torch', 'tensorflow', 'onnxruntime', 'jax'"),
    (lambda: op.check_size("huge"), "--size must be one of 'small', 'default', 'large'. Received: 'huge'"),
    (lambda: op.run_op_benchmark(max_time=0), "--max-time must be a positive number of seconds. Received: 0"),
    (lambda: op.run_op_benchmark(device="tpu"), "Device must be 'cpu', 'gpu' or 'gpu:N'"),
    (lambda: op.run_op_benchmark(threads=0), "--threads must be a positive integer. Received: 0"),
    (lambda: op.load_custom_cases("no_colon"), "--custom-op must be MODULE:NAME or FILE.py:NAME"),
])
def test_bad_values_are_user_errors(call, message):
    with pytest.raises(UserError) as info:
        call()
    assert message in str(info.value)


def test_cli_bad_values_one_line_exit_2():
    for args, message in ((("--size", "huge"), "Received: 'huge'"), (("--suite", "fft"), "unknown: 'fft'"),
                          (("--format", "html"), "--format must be one of 'table', 'markdown', 'csv'")):
        proc = run_cli("bench", "op", *args)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


class _Scale(d5.CustomPythonOp):
    def forward(self, x):
        return 3 * x

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return 3 * grads[0]


def test_custom_case_from_a_file(tmp_path):
    with pytest.raises(UserError, match="every dimension known"):
        op.custom_case(_Scale([d5.tensordesc(np.float32, [None])], [d5.tensordesc(np.float32, [None])]), flops=1)
    case = op.custom_case(_Scale([d5.tensordesc(np.float32, [64, 32])], [d5.tensordesc(np.float32, [64, 32])]),
                          flops=2048)
    assert case.bytes_moved == 2 * 64 * 32 * 4  # input and output, counted once each
    (tmp_path / "myops.py").write_text(
        "import numpy as np\nimport deep500lite as d5\nfrom deep500lite.bench.op import custom_case\n"
        "class Neg(d5.CustomPythonOp):\n"
        "    def forward(self, x):\n        return -x\n"
        "    def backward(self, g, i, o):\n        return -g[0]\n"
        "def cases(size):\n"
        "    n = 1000 if size == 'small' else 10**6\n"
        "    d = d5.tensordesc(np.float32, [n])\n"
        "    return [custom_case(Neg([d], [d]), flops=n, name=f'neg-{n}')]\n")
    cases = op.load_custom_cases(f"{tmp_path / 'myops.py'}:cases", "small")
    peak = Peak("cpu", flops=100e9, bandwidth=10e9, flops_method="given", bandwidth_method="given", kernels={})
    bench = op.run_op_benchmark(["custom"], ["reference"], "small", 0.02, custom_cases=cases, peak=peak)
    (res,) = bench.results
    assert (res.framework, res.case.name) == ("op", "neg-1000")
    seconds = np.median(res.measurement.raw_times)
    assert res.gflops == pytest.approx(1000 / seconds / 1e9)
    assert res.roofline.bound == "memory"  # 1000 FLOP / 8000 bytes, far below the ridge of 10 FLOP/B
    assert res.roofline.fraction_of_attainable == pytest.approx(1000 / seconds / (1000 / 8000 * 10e9))
    with pytest.raises(UserError, match="has no 'nothing'"):
        op.load_custom_cases(f"{tmp_path / 'myops.py'}:nothing")


def _torch_has_cuda():
    if not d5.is_framework_available("torch"):
        return False
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not d5.is_framework_available("torch") or _torch_has_cuda(), reason="needs torch without a GPU")
def test_gpu_without_cuda_is_a_clear_error():
    with pytest.raises(DeviceError, match=r"--device gpu:0 needs a CUDA GPU visible to PyTorch"):
        op.run_op_benchmark(["gemm"], ["torch"], "small", 0.05, device="gpu:0")


@pytest.mark.gpu
@pytest.mark.skipif(not _torch_has_cuda(), reason="needs a CUDA GPU")
def test_gpu_small_gemm():
    bench = op.run_op_benchmark(["gemm"], ["torch", "reference"], "small", 0.05, device="gpu:0")
    assert {r.framework for r in bench.results} == {"torch"}
    assert any(s["framework"] == "reference" for s in bench.skipped)
    assert all(r.max_rel_error < 1e-3 for r in bench.results)


@pytest.mark.parametrize("framework", [
    pytest.param(fw, marks=pytest.mark.skipif(not d5.is_framework_available(fw), reason=f"needs {fw}"))
    for fw in ("reference", "tensorflow", "onnxruntime")])
def test_framework_that_cannot_use_the_device_raises_device_error(framework):
    from deep500lite.registry import framework_module

    if framework == "tensorflow":
        import tensorflow as tf

        if tf.config.list_physical_devices("GPU"):
            pytest.skip("TensorFlow sees a GPU here")
    if framework == "onnxruntime":
        import onnxruntime as ort

        if "CUDAExecutionProvider" in ort.get_available_providers():
            pytest.skip("ONNX Runtime has CUDA here")
    case = op.gemm_cases("small")[0]
    inputs = case.make_inputs(np.random.default_rng(0))
    with pytest.raises(DeviceError):
        framework_module(framework, "bench").op_runner(case, inputs, d5.GPUDevice(0), 1)


def test_device_error_from_a_runner_skips_the_framework(monkeypatch):
    import contextlib
    import types

    @contextlib.contextmanager
    def op_threads(threads, device):
        yield "none"

    def op_runner(case, inputs, device, threads):
        raise DeviceError("cannot run here")

    fake = types.SimpleNamespace(op_threads=op_threads, op_runner=op_runner)
    monkeypatch.setattr("deep500lite.frameworkspec.FrameworkSpec.role", lambda self, role: fake)
    peak = Peak("cpu", flops=100e9, bandwidth=10e9, flops_method="given", bandwidth_method="given", kernels={})
    bench = op.run_op_benchmark(["gemm"], ["reference"], "small", 0.02, peak=peak)
    assert bench.results == []
    assert bench.skipped == [{"framework": "reference", "case": None, "reason": "cannot run here"}]
    assert bench.skip_lines() == ["skipped reference: cannot run here"]
