"""The model zoo: published parameter counts, shapes on the reference executor, torch parity,
seeded initialization, trainability and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import networks
from deep500lite.errors import UserError

from support import framework_params

# ----------------------------------------------------------------------------- published numbers
# Exact counts are torchvision's published ``num_params`` (ImageNet, 1000 classes, 224x224);
# rounded counts are from the papers: He et al. 2016 (CIFAR ResNets, Table 6: option A shortcuts),
# Zagoruyko & Komodakis 2016 (WRN, Table 1), LeNet-5 with full C3 connections (61,706).
PUBLISHED = [
    # (id, name, kwargs, classes, shape, published, tolerance)
    ("resnet20-A", "resnet", dict(depth=20, shortcut="A"), 10, (3, 32, 32), 0.27e6, 0.005e6),
    ("resnet32-A", "resnet", dict(depth=32, shortcut="A"), 10, (3, 32, 32), 0.46e6, 0.005e6),
    ("resnet44-A", "resnet", dict(depth=44, shortcut="A"), 10, (3, 32, 32), 0.66e6, 0.005e6),
    ("resnet56-A", "resnet", dict(depth=56, shortcut="A"), 10, (3, 32, 32), 0.85e6, 0.005e6),
    ("resnet110-A", "resnet", dict(depth=110, shortcut="A"), 10, (3, 32, 32), 1.7e6, 0.05e6),
    # Option B adds 1x1 projections (+BN) to the two downsampling blocks: 2,752 more for every depth.
    ("resnet20-B", "resnet", dict(depth=20), 10, (3, 32, 32), 0.27e6, 0.005e6),
    ("resnet18", "resnet", dict(depth=18), 1000, (3, 224, 224), 11_689_512, 0),
    ("resnet34", "resnet", dict(depth=34), 1000, (3, 224, 224), 21_797_672, 0),
    ("resnet50", "resnet", dict(depth=50), 1000, (3, 224, 224), 25_557_032, 0),
    ("vgg11", "vgg", dict(depth=11), 1000, (3, 224, 224), 132_863_336, 0),
    ("vgg16", "vgg", dict(depth=16), 1000, (3, 224, 224), 138_357_544, 0),
    ("vgg16_bn", "vgg", dict(depth=16, batch_norm=True), 1000, (3, 224, 224), 138_365_992, 0),
    ("vgg19", "vgg", dict(depth=19), 1000, (3, 224, 224), 143_667_240, 0),
    ("alexnet", "alexnet", dict(), 1000, (3, 224, 224), 61_100_840, 0),
    ("wrn-28-10", "wide_resnet", dict(depth=28, width=10), 10, (3, 32, 32), 36.5e6, 0.05e6),
    ("wrn-40-4", "wide_resnet", dict(depth=40, width=4), 10, (3, 32, 32), 8.9e6, 0.05e6),
    ("wrn-16-8", "wide_resnet", dict(depth=16, width=8), 10, (3, 32, 32), 11.0e6, 0.05e6),
    ("lenet5", "lenet", dict(), 10, (1, 28, 28), 61_706, 0),
]


@pytest.mark.parametrize("name,kwargs,classes,shape,published,tol", [p[1:] for p in PUBLISHED],
                         ids=[p[0] for p in PUBLISHED])
def test_parameter_counts_match_published_architectures(name, kwargs, classes, shape, published, tol):
    count = networks.model_parameter_count(name, classes=classes, shape=shape, **kwargs)
    assert abs(count - published) <= tol, f"{count:,} parameters, published {published:,.0f}"


def test_resnet_shortcut_b_adds_the_two_projections():
    a = networks.model_parameter_count("resnet", shape=(3, 32, 32), depth=56, shortcut="A")
    b = networks.model_parameter_count("resnet", shape=(3, 32, 32), depth=56, shortcut="B")
    assert b - a == (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64)


# ------------------------------------------------------------------------------ small variants
SMALL = [
    ("mlp", dict(hidden=(8,)), (1, 8, 8)),
    ("lenet", dict(), (1, 8, 8)),
    ("lenet", dict(), (1, 28, 28)),
    ("bn_cnn", dict(width=4), (1, 8, 8)),
    ("resnet", dict(depth=20), (1, 8, 8)),
    ("resnet", dict(depth=20, shortcut="A"), (3, 8, 8)),
    ("resnet", dict(depth=18), (3, 16, 16)),
    ("wide_resnet", dict(depth=10, width=1, dropout=0.3), (3, 8, 8)),
    ("alexnet", dict(width=0.125, hidden=16), (1, 8, 8)),
    ("alexnet", dict(variant="imagenet", width=0.0625, hidden=16), (3, 63, 63)),
    ("vgg", dict(depth=11, width=0.0625, hidden=16), (3, 32, 32)),
    ("vgg", dict(depth=13, width=0.0625, hidden=16, batch_norm=True, variant="imagenet"), (3, 32, 40)),
]
SMALL_IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}-{'x'.join(map(str, s))}" for n, kw, s in SMALL]


def test_list_models():
    assert networks.list_models() == ["alexnet", "bert", "bn_cnn", "deep_mnist", "lenet", "mlp", "mnist_cnn",
                                      "mobilenet_v2", "resnet", "simple_cnn", "vgg", "wide_resnet"]


@pytest.mark.parametrize("name,kwargs,shape", SMALL, ids=SMALL_IDS)
def test_small_models_run_on_the_reference_executor(name, kwargs, shape):
    net, inp, out = networks.create_model(name, 2, classes=5, shape=shape, **kwargs)
    assert net.inputs == [inp] and net.outputs == [out]
    x = np.random.default_rng(0).standard_normal((2, *shape)).astype(np.float32)
    y = d5.executor(net, "reference").inference({inp: x})[out]
    assert y.shape == (2, 5) and y.dtype == np.float32 and np.all(np.isfinite(y))
    # the dry-run count (no weights allocated) equals the built network's
    assert networks.count_parameters(net) == networks.model_parameter_count(name, classes=5, shape=shape, **kwargs)


def test_symbolic_batch():
    net, inp, out = networks.create_model("wide_resnet", None, classes=3, shape=(3, 8, 8), depth=10, width=1)
    ex = d5.executor(net, "reference")
    for n in (1, 3):
        assert ex.inference({inp: np.ones((n, 3, 8, 8), np.float32)})[out].shape == (n, 3)


@pytest.mark.parametrize("framework", framework_params(["torch", "tensorflow", "onnxruntime"]))
def test_new_operators_agree_on_every_executor(framework):
    # adaptive pooling (MatMul with Constant nodes), Dropout with a Constant ratio, option-A Slice/Pad
    for name, kwargs, shape in [("vgg", dict(depth=11, width=0.0625, hidden=16, variant="imagenet"), (3, 32, 40)),
                                ("wide_resnet", dict(depth=10, width=1, dropout=0.3), (3, 8, 8)),
                                ("resnet", dict(depth=20, shortcut="A"), (3, 8, 8))]:
        x = np.random.default_rng(0).standard_normal((2, *shape)).astype(np.float32)
        outs = []
        for fw in ("reference", framework):
            net, inp, out = networks.create_model(name, 2, classes=5, shape=shape, **kwargs)
            outs.append(d5.executor(net, fw).inference({inp: x})[out])
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5 * np.abs(outs[0]).max())


# ---------------------------------------------------------------------------- seeded weights
def test_same_seed_same_weights_and_he_scaling():
    a, _, _ = networks.create_model("vgg", 1, shape=(3, 32, 32), seed=4, depth=11, width=0.5, variant="cifar")
    b, _, _ = networks.create_model("vgg", 1, shape=(3, 32, 32), seed=4, depth=11, width=0.5, variant="cifar")
    c, _, _ = networks.create_model("vgg", 1, shape=(3, 32, 32), seed=5, depth=11, width=0.5, variant="cifar")
    va, vb, vc = a.host_values(), b.host_values(), c.host_values()
    assert list(va) == list(vb)
    assert all(np.array_equal(va[k], vb[k]) for k in va)
    assert not np.array_equal(va["features.3.weight"], vc["features.3.weight"])
    w = va["features.8.weight"]  # 128 -> 128 channels, 3x3: fan_in 1152, 147,456 weights
    fan_in = w.shape[1] * 9
    assert abs(w.var() / (2.0 / fan_in) - 1) < 0.02  # He: variance 2 / fan_in
    assert abs(w.mean()) < 5 * np.sqrt(2.0 / fan_in / w.size)  # 5 standard errors
    assert np.all(va["features.0.bias"] == 0)


# --------------------------------------------------------------------------------- torch parity
def _torch_models():
    import torch
    from torch import nn

    def vgg(c, depth, bn, variant, width, hidden, classes):
        layers, cin = [], c
        for item in networks.VGG_CONFIGS[depth]:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
                continue
            cout = max(1, round(item * width))
            layers += [nn.Conv2d(cin, cout, 3, padding=1)] + ([nn.BatchNorm2d(cout)] if bn else []) + [nn.ReLU()]
            cin = cout

        class VGG(nn.Module):
            def __init__(self):
                super().__init__()
                self.features = nn.Sequential(*layers)
                if variant == "imagenet":
                    self.avgpool = nn.AdaptiveAvgPool2d(7)
                    self.classifier = nn.Sequential(nn.Linear(cin * 49, hidden), nn.ReLU(), nn.Dropout(),
                                                    nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(),
                                                    nn.Linear(hidden, classes))
                else:
                    self.avgpool = nn.Identity()
                    self.classifier = nn.LazyLinear(classes)

            def forward(self, x):
                return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))
        return VGG()

    def alexnet(c, variant, width, hidden, classes):
        ch = [max(1, round(k * width)) for k in (64, 192, 384, 256, 256)]
        if variant == "imagenet":
            conv = [(11, 4, 2), (5, 1, 2), (3, 1, 1), (3, 1, 1), (3, 1, 1)]
            pool = lambda: nn.MaxPool2d(3, 2)  # noqa: E731
        else:
            conv = [(3, 1, 1)] * 5
            pool = lambda: nn.MaxPool2d(2, 2)  # noqa: E731
        layers, cin = [], c
        for i, ((k, s, p), cout) in enumerate(zip(conv, ch)):
            layers += [nn.Conv2d(cin, cout, k, s, p), nn.ReLU()] + ([pool()] if i in (0, 1, 4) else [])
            cin = cout

        class AlexNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.features = nn.Sequential(*layers)
                self.avgpool = nn.AdaptiveAvgPool2d(6) if variant == "imagenet" else nn.Identity()
                self.classifier = nn.Sequential(nn.Dropout(), nn.LazyLinear(hidden), nn.ReLU(), nn.Dropout(),
                                                nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))

            def forward(self, x):
                return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))
        return AlexNet()

    class WideBlock(nn.Module):
        def __init__(self, cin, cout, stride, dropout):
            super().__init__()
            self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn2, self.conv2 = nn.BatchNorm2d(cout), nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.drop = nn.Dropout(dropout)
            self.project = stride != 1 or cin != cout
            if self.project:
                self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)

        def forward(self, x):
            a = torch.relu(self.bn1(x))
            out = self.conv2(self.drop(torch.relu(self.bn2(self.conv1(a)))))
            return out + (self.shortcut(a) if self.project else x)

    def wide_resnet(c, depth, width, dropout, classes):
        n = (depth - 4) // 6

        class WRN(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(c, 16, 3, 1, 1, bias=False)
                cin = 16
                for s, base in enumerate((16, 32, 64)):
                    blocks = []
                    for i in range(n):
                        blocks.append(WideBlock(cin, base * width, 2 if s and not i else 1, dropout))
                        cin = base * width
                    setattr(self, f"block{s + 1}", nn.ModuleList(blocks))
                self.bn, self.fc = nn.BatchNorm2d(cin), nn.Linear(cin, classes)

            def forward(self, x):
                x = self.conv1(x)
                for s in (1, 2, 3):
                    for blk in getattr(self, f"block{s}"):
                        x = blk(x)
                return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(self.bn(x)), 1), 1))
        return WRN()

    class BasicA(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.stride, self.extra = stride, cout - cin

        def forward(self, x):
            out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            sc = x[:, :, ::self.stride, ::self.stride]
            if self.extra:
                sc = nn.functional.pad(sc, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))
            return torch.relu(out + sc)

    def resnet_a(c, depth, classes):
        n = (depth - 2) // 6

        class ResNetA(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1, self.bn1 = nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
                cin = 16
                for s, w in enumerate((16, 32, 64)):
                    blocks = []
                    for i in range(n):
                        blocks.append(BasicA(cin, w, 2 if s and not i else 1))
                        cin = w
                    setattr(self, f"layer{s + 1}", nn.ModuleList(blocks))
                self.fc = nn.Linear(64, classes)

            def forward(self, x):
                x = torch.relu(self.bn1(self.conv1(x)))
                for s in (1, 2, 3):
                    for blk in getattr(self, f"layer{s}"):
                        x = blk(x)
                return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
        return ResNetA()

    return dict(vgg=vgg, alexnet=alexnet, wide_resnet=wide_resnet, resnet=resnet_a)


PARITY = [
    ("vgg", dict(depth=11, width=0.0625, hidden=16, variant="cifar"), (3, 32, 32),
     dict(depth=11, bn=False, variant="cifar", width=0.0625, hidden=16)),
    ("vgg", dict(depth=16, width=0.0625, hidden=16, variant="imagenet", batch_norm=True), (3, 36, 32),
     dict(depth=16, bn=True, variant="imagenet", width=0.0625, hidden=16)),
    ("vgg", dict(depth=19, width=0.03125, hidden=8, batch_norm=True), (2, 32, 32),
     dict(depth=19, bn=True, variant="cifar", width=0.03125, hidden=8)),
    ("alexnet", dict(width=0.125, hidden=16), (3, 12, 16), dict(variant="cifar", width=0.125, hidden=16)),
    ("alexnet", dict(variant="imagenet", width=0.0625, hidden=16), (3, 255, 159),
     dict(variant="imagenet", width=0.0625, hidden=16)),
    ("wide_resnet", dict(depth=10, width=2, dropout=0.3), (3, 8, 8), dict(depth=10, width=2, dropout=0.3)),
    ("wide_resnet", dict(depth=16, width=1), (1, 8, 8), dict(depth=16, width=1, dropout=0.0)),
    ("resnet", dict(depth=20, shortcut="A"), (3, 8, 8), dict(depth=20)),
]


@pytest.mark.requires("torch")
@pytest.mark.parametrize("name,kwargs,shape,torch_kwargs", PARITY, ids=[f"{p[0]}-{i}" for i, p in enumerate(PARITY)])
def test_outputs_match_the_same_architecture_in_torch(name, kwargs, shape, torch_kwargs):
    import torch

    classes = 7
    net, inp, out = networks.create_model(name, 3, classes=classes, shape=shape, seed=1, **kwargs)
    rng = np.random.default_rng(2)
    for pname in net.parameters:  # make batch normalization non-trivial (and biases non-zero)
        value = net.host_values()[pname]
        if pname.endswith("running_var"):
            net.feed_tensor(pname, rng.uniform(0.5, 2.0, value.shape).astype(np.float32))
        elif value.ndim == 1:
            net.feed_tensor(pname, rng.normal(0.0, 0.2, value.shape).astype(np.float32) + value)
    model = _torch_models()[name](shape[0], classes=classes, **torch_kwargs)
    x = rng.standard_normal((3, *shape)).astype(np.float32)
    with torch.no_grad():
        model(torch.from_numpy(x))  # materializes lazy layers
    state = model.state_dict()
    ours = net.host_values()
    expected = {k for k in state if not k.endswith("num_batches_tracked")}
    assert set(ours) - {k for k in ours if ours[k].dtype != np.float32} == expected
    model.load_state_dict({k: (torch.from_numpy(ours[k].copy()) if k in ours else v) for k, v in state.items()})
    model.eval()
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    got = d5.executor(net, "reference").inference({inp: x})[out]
    assert got.shape == (3, classes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# ----------------------------------------------------------------------------------- training
@pytest.mark.parametrize("name,kwargs,shape", [
    ("wide_resnet", dict(depth=10, width=1), (3, 8, 8)),
    ("alexnet", dict(width=0.125, hidden=16, dropout=0.0), (1, 8, 8)),
    ("vgg", dict(depth=11, width=0.0625, hidden=16, dropout=0.0, batch_norm=True, variant="imagenet"), (3, 32, 32)),
    ("resnet", dict(depth=20, shortcut="A"), (1, 8, 8)),
])
def test_adding_the_dataset_loss_makes_models_trainable(name, kwargs, shape):
    pytest.importorskip("onnxruntime", reason="the fast training path; the reference one is tested in test_autodiff")
    from deep500lite.datasets import dataset_loss
    from deep500lite.frameworks.reference import GradientDescent

    net, inp, out = networks.create_model(name, 4, classes=10, shape=shape, **kwargs)
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    trainable = networks.count_parameters(net)
    pairs = net.gradient("loss")
    assert sum(net.host_values()[p].size for p, _ in pairs) == trainable
    ex = d5.executor(net, "onnxruntime")
    rng = np.random.default_rng(0)
    feeds = {inp: rng.standard_normal((4, *shape)).astype(np.float32), "label": rng.integers(0, 10, 4)}
    opt = GradientDescent(ex, learning_rate=1e-3)
    before = float(opt.step(feeds)["loss"])
    grads = ex.network.fetch_tensors([g for _, g in pairs])
    assert all(np.all(np.isfinite(g)) for g in grads) and sum(float(np.abs(g).sum()) > 0 for g in grads) == len(grads)
    after = float(opt.step(feeds)["loss"])
    assert np.isfinite(before) and after < before


def test_dropout_is_trained_with_masks_on_the_reference_executor():
    from deep500lite.datasets import dataset_loss

    net, inp, out = networks.create_model("alexnet", 4, classes=3, shape=(1, 8, 8), width=0.125, hidden=8)
    assert sum(n.op_type == "Dropout" for n in net.graph.node) == 2
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    ex = d5.executor(net, "reference")
    feeds = {inp: np.ones((4, 1, 8, 8), np.float32), "label": np.zeros(4, np.int64)}
    first = ex.inference(feeds)[out]
    np.testing.assert_array_equal(first, ex.inference(feeds)[out])  # inference: dropout is the identity
    losses = {float(ex.inference_and_backprop(feeds, "loss")["loss"]) for _ in range(3)}
    assert len(losses) > 1  # training: a new dropout mask every step


# ------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("call,match", [
    (lambda: networks.create_model("resnet9000", 1), r"Unknown network 'resnet9000'. Known networks: 'alexnet', "
                                                     r"'bert', 'bn_cnn', 'deep_mnist', 'lenet', 'mlp', 'mnist_cnn', 'mobilenet_v2', 'resnet', 'simple_cnn', "
                                                     r"'vgg', 'wide_resnet'"),
    (lambda: networks.create_model("resnet", 1, shape=(3, 32, 32), depth=21),
     r"resnet depth must be one of \[20, 32, 44, 56, 110, 18, 34, 50\]. Received: depth=21"),
    (lambda: networks.create_model("resnet", 1, shape=(3, 32, 32), depth=18, shortcut="A"),
     r"projection shortcuts only"),
    (lambda: networks.create_model("resnet", 1, shape=(3, 32, 32), shortcut="C"),
     r"shortcut must be one of 'A', 'B'. Received: shortcut='C'"),
    (lambda: networks.create_model("vgg", 1, shape=(3, 32, 32), depth=15),
     r"vgg depth must be one of \[11, 13, 16, 19\]. Received: depth=15"),
    (lambda: networks.create_model("vgg", 1, shape=(3, 16, 16)),
     r"at least 32x32 pixels \(five 2x2 poolings\). Received: shape=\(3, 16, 16\)"),
    (lambda: networks.create_model("vgg", 1, shape=(3, 32, 32), batch_norm="yes"),
     r"'batch_norm' must be True or False"),
    (lambda: networks.create_model("vgg", 1, shape=(3, 32, 32), variant="tiny"),
     r"variant must be one of 'imagenet', 'cifar'. Received: variant='tiny'"),
    (lambda: networks.create_model("vgg", 1, shape=(3, 32, 32), width=0), r"'width' must be a finite number > 0"),
    (lambda: networks.create_model("alexnet", 1, shape=(3, 32, 32), variant="imagenet"), r"at least 63x63 pixels"),
    (lambda: networks.create_model("alexnet", 1, shape=(3, 4, 4)), r"at least 8x8 pixels"),
    (lambda: networks.create_model("wide_resnet", 1, shape=(3, 32, 32), depth=27),
     r"depth must be 6n\+4 \(10, 16, 22, 28, 34, 40, ...\). Received: depth=27"),
    (lambda: networks.create_model("wide_resnet", 1, shape=(3, 32, 32), width=0), r"'width' must be an integer from 1 to"),
    (lambda: networks.create_model("wide_resnet", 1, shape=(3, 32, 32), dropout=1.0),
     r"'dropout' must be a dropout probability in \[0, 1\). Received: 1.0"),
    (lambda: networks.create_model("lenet", 1, shape=(64,)), r"lenet takes samples shaped \(C, H, W\)"),
    (lambda: networks.create_model("lenet", 1, shape=(1, 3, 3)), r"at least 4x4 pixels"),
    (lambda: networks.create_model("lenet", 1, shape=(1, 0, 8)), r"shape must be a sequence of positive integers"),
    (lambda: networks.create_model("lenet", 1, shape=3), r"shape must be a sequence of positive integers"),
    (lambda: networks.create_model("lenet", 0, shape=(1, 8, 8)), r"batch_size must be an integer from 1 to 2,147,483,647 \(2\*\*31 - 1\) or None"),
    (lambda: networks.create_model("lenet", 1, classes=1, shape=(1, 8, 8)), r"classes must be an integer >= 2"),
    (lambda: networks.create_model("lenet", 1, shape=(1, 8, 8), seed=-1), r"seed must be an integer from 0 to 4,294,967,295"),
    (lambda: networks.create_model("lenet", 1, shape=(1, 8, 8), depth=3),
     r"lenet has no option 'depth'. Its options: none"),
    (lambda: networks.create_model("vgg", 1, shape=(3, 32, 32), dpeth=3),
     r"vgg has no option 'dpeth'. Its options: 'depth', 'batch_norm', 'variant', 'width', 'hidden', 'dropout'"),
])
def test_bad_arguments_are_user_errors(call, match):
    with pytest.raises(UserError, match=match):
        call()


def test_model_options_lists_defaults():
    assert networks.model_options("wide_resnet") == {"depth": 28, "width": 10, "dropout": 0.0}
