"""Datasets read from real files that the tests write themselves: IDX (plain and gzip), CIFAR-10/100
binary batches, image folders; digits and synthetic; missing and corrupt files give named errors."""

import gzip
import os
import struct

import numpy as np
import pytest

from deep500lite import datasets
from deep500lite.datasets import CorruptFileError, MissingDatasetError
from deep500lite.errors import UserError

# -------------------------------------------------------------------------------- writers (tests' own)


def write_idx(path, array, type_byte=0x08, big_endian_dtype=">u1", gz=False):
    """An IDX file as described on http://yann.lecun.com/exdb/mnist/ (magic 0x0000TTDD, dims, data)."""
    array = np.asarray(array)
    raw = (bytes([0, 0, type_byte, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
           + array.astype(big_endian_dtype).tobytes())
    if gz:
        raw = gzip.compress(raw)
        path = str(path) + ".gz"
    with open(path, "wb") as f:
        f.write(raw)
    return path


def make_mnist(folder, rng, n_train=12, n_test=5, gz=False):
    os.makedirs(folder, exist_ok=True)
    out = {}
    for split, n, prefix in (("train", n_train, "train"), ("test", n_test, "t10k")):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), images, gz=gz)
        write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), labels, gz=gz)
        out[split] = (images, labels)
    return out


def write_cifar(path, images, labels):
    """CIFAR binary records: label byte(s), then 1024 red, 1024 green, 1024 blue bytes (row-major 32x32)."""
    labels = np.asarray(labels, dtype=np.uint8).reshape(len(images), -1)
    with open(path, "wb") as f:
        for img, lab in zip(images, labels):
            f.write(bytes(lab.tolist()))
            for channel in range(3):
                for row in range(32):
                    f.write(bytes(img[channel, row].tolist()))


def make_cifar10(folder, rng, per_batch=3, n_test=4):
    os.makedirs(folder, exist_ok=True)
    parts = []
    for i in range(1, 6):
        images = rng.integers(0, 256, size=(per_batch, 3, 32, 32), dtype=np.uint8)
        labels = rng.integers(0, 10, size=per_batch)
        write_cifar(os.path.join(folder, f"data_batch_{i}.bin"), images, labels)
        parts.append((images, labels))
    test_images = rng.integers(0, 256, size=(n_test, 3, 32, 32), dtype=np.uint8)
    test_labels = rng.integers(0, 10, size=n_test)
    write_cifar(os.path.join(folder, "test_batch.bin"), test_images, test_labels)
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])), (test_images, test_labels)


def make_cifar100(folder, rng, n_train=6, n_test=3):
    os.makedirs(folder, exist_ok=True)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        coarse, fine = rng.integers(0, 20, size=n), rng.integers(0, 100, size=n)
        write_cifar(os.path.join(folder, f"{split}.bin"), images, np.stack([coarse, fine], 1))
        out[split] = (images, coarse, fine)
    return out


def make_image_folder(root, rng, sizes=None, classes=("cat", "dog", "eel"), per_class=2, mode="RGB"):
    from PIL import Image

    made = {"train": [], "val": []}
    for split in ("train", "val"):
        for c in classes:
            os.makedirs(os.path.join(root, split, c))
            for k in range(per_class):
                h, w = (sizes or {}).get((split, c, k), (6, 5))
                shape = (h, w, 3) if mode == "RGB" else (h, w)
                pixels = rng.integers(0, 256, size=shape, dtype=np.uint8)
                path = os.path.join(root, split, c, f"img{k}.png")
                Image.fromarray(pixels, mode).save(path)
                made[split].append((path, c, pixels))
    return made


# -------------------------------------------------------------------------------- IDX: MNIST, Fashion-MNIST


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_idx_datasets_round_trip(tmp_path, rng, name, gz):
    made = make_mnist(tmp_path, rng, gz=gz)
    train, test = datasets.load_dataset(name, "x", "y", root=tmp_path)
    for ds, (images, labels) in ((train, made["train"]), (test, made["test"])):
        assert len(ds) == len(images)
        batch = ds[np.arange(len(ds))]
        assert batch["x"].dtype == np.float32 and batch["x"].shape == (len(images), 1, 28, 28)
        np.testing.assert_array_equal(batch["x"][:, 0], images.astype(np.float32) / 255)
        assert batch["y"].dtype == np.int64
        np.testing.assert_array_equal(batch["y"], labels)
    one = train[3]
    np.testing.assert_array_equal(one["x"][0], made["train"][0][3] / np.float32(255))
    assert datasets.dataset_shape(name) == (10, 1, 28, 28)


def test_read_idx_other_types(tmp_path, rng):
    a = rng.standard_normal((3, 4, 2)).astype(np.float32)
    np.testing.assert_array_equal(datasets.read_idx(write_idx(tmp_path / "f", a, 0x0D, ">f4")), a)
    b = rng.integers(-30000, 30000, size=(7,)).astype(np.int16)
    out = datasets.read_idx(write_idx(tmp_path / "s", b, 0x0B, ">i2", gz=True))
    assert out.dtype == np.int16 and out.dtype.isnative
    np.testing.assert_array_equal(out, b)


def test_default_root_comes_from_environment(tmp_path, rng, monkeypatch):
    made = make_mnist(tmp_path / "mnist", rng)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    train, _ = datasets.load_dataset("mnist", "x", "y")
    np.testing.assert_array_equal(train[np.arange(len(train))]["y"], made["train"][1])
    monkeypatch.delenv("DEEP500LITE_DATA")
    assert datasets.default_root("mnist") == os.path.join(os.path.expanduser("~"), ".cache", "deep500lite",
                                                          "data", "mnist")


def test_missing_idx_file_says_where_to_put_it(tmp_path, rng, monkeypatch):
    with pytest.raises(MissingDatasetError) as err:
        datasets.load_dataset("mnist", "x", "y", root=tmp_path / "nothing")
    msg = str(err.value)
    assert str(tmp_path / "nothing" / "train-images-idx3-ubyte") in msg
    assert "http://yann.lecun.com/exdb/mnist/" in msg and "downloads nothing" in msg
    assert isinstance(err.value, FileNotFoundError)
    # Without root=, the message names the default folder and says how to point deep500lite elsewhere.
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path / "data"))
    with pytest.raises(MissingDatasetError) as err:
        datasets.load_dataset("fashion_mnist", "x", "y")
    msg = str(err.value)
    assert str(tmp_path / "data" / "fashion_mnist" / "train-images-idx3-ubyte") in msg
    assert "root=DIR" in msg and "DEEP500LITE_DATA" in msg and "zalandoresearch/fashion-mnist" in msg
    # One file of four missing: that one is named.
    make_mnist(tmp_path / "m", rng)
    os.remove(tmp_path / "m" / "t10k-labels-idx1-ubyte")
    with pytest.raises(MissingDatasetError, match="t10k-labels-idx1-ubyte'"):
        datasets.load_dataset("mnist", "x", "y", root=tmp_path / "m")


def _damage(path, fn):
    raw = bytearray(open(path, "rb").read())
    raw = fn(raw)
    with open(path, "wb") as f:
        f.write(bytes(raw))


@pytest.mark.parametrize("damage,fault", [
    (lambda r: b"\x12\x34" + r[2:], "bad magic number 0x12340803"),
    (lambda r: r[:2] + b"\x07" + r[3:], "bad magic number 0x00000703"),
    (lambda r: r[:-5], "wrong length"),
    (lambda r: r + b"\x00", "followed by extra bytes"),
    (lambda r: r[:10], "wrong length"),
])
def test_corrupt_idx_file_is_named(tmp_path, rng, damage, fault):
    make_mnist(tmp_path, rng)
    path = tmp_path / "train-images-idx3-ubyte"
    _damage(path, damage)
    with pytest.raises(CorruptFileError) as err:
        datasets.load_dataset("mnist", "x", "y", root=tmp_path)
    assert str(path) in str(err.value) and fault in str(err.value)


def test_truncated_idx_data_says_truncated(tmp_path, rng):
    make_mnist(tmp_path, rng)
    _damage(tmp_path / "train-labels-idx1-ubyte", lambda r: r[:-1])
    with pytest.raises(CorruptFileError, match=r"declares dimensions \[12\] .* 12 bytes of data, but the file has 11 "
                                                r"\(truncated\)"):
        datasets.load_dataset("mnist", "x", "y", root=tmp_path)


def test_corrupt_gzip_idx_file_is_named(tmp_path, rng):
    make_mnist(tmp_path, rng, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    _damage(path, lambda r: r[:-8] + bytes([r[-8] ^ 0xFF]) + r[-7:])  # the gzip trailer's CRC-32
    with pytest.raises(CorruptFileError, match=r"train-images-idx3-ubyte.gz'.*gzip stream is damaged.*CRC"):
        datasets.load_dataset("mnist", "x", "y", root=tmp_path)
    _damage(path, lambda r: r[: len(r) // 2])
    with pytest.raises(CorruptFileError, match=r"train-images-idx3-ubyte.gz'.*gzip stream is truncated"):
        datasets.load_dataset("mnist", "x", "y", root=tmp_path)


def test_idx_label_out_of_range_and_count_mismatch(tmp_path, rng):
    made = make_mnist(tmp_path, rng)
    labels = made["train"][1].copy()
    labels[4] = 11
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels)
    with pytest.raises(CorruptFileError, match=r"train-labels-idx1-ubyte' at byte offset 12: label 4 is 11"):
        datasets.load_dataset("mnist", "x", "y", root=tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", made["train"][1][:-1])
    with pytest.raises(CorruptFileError, match="it has 11 labels but .* has 12 images"):
        datasets.load_dataset("mnist", "x", "y", root=tmp_path)


# -------------------------------------------------------------------------------- CIFAR binary


@pytest.mark.parametrize("subfolder", ["", "cifar-10-batches-bin"])
def test_cifar10_round_trip(tmp_path, rng, subfolder):
    (xa, ya), (xb, yb) = make_cifar10(tmp_path / subfolder if subfolder else tmp_path, rng)
    train, test = datasets.load_dataset("cifar10", "x", "y", root=tmp_path)
    assert len(train) == 15 and len(test) == 4
    got = train[np.arange(15)]
    np.testing.assert_array_equal(got["x"], xa.astype(np.float32) / 255)
    np.testing.assert_array_equal(got["y"], ya)
    assert got["x"].dtype == np.float32 and got["y"].dtype == np.int64
    np.testing.assert_array_equal(test[1:3]["x"], xb[1:3] / np.float32(255))
    np.testing.assert_array_equal(test[np.arange(4)]["y"], yb)
    assert datasets.dataset_shape("cifar10") == (10, 3, 32, 32)


def test_cifar100_fine_and_coarse(tmp_path, rng):
    made = make_cifar100(tmp_path / "cifar-100-binary", rng)
    train, test = datasets.load_dataset("cifar100", "x", "y", root=tmp_path)
    np.testing.assert_array_equal(train[np.arange(6)]["y"], made["train"][2])
    np.testing.assert_array_equal(test[np.arange(3)]["x"], made["test"][0] / np.float32(255))
    train, _ = datasets.load_dataset("cifar100", "x", "y", root=tmp_path, label_mode="coarse")
    np.testing.assert_array_equal(train[np.arange(6)]["y"], made["train"][1])
    assert datasets.dataset_shape("cifar100") == (100, 3, 32, 32)
    assert datasets.dataset_shape("cifar100", label_mode="coarse") == (20, 3, 32, 32)
    with pytest.raises(UserError, match=r"label_mode must be one of 'fine', 'coarse'. Received: 'medium'"):
        datasets.load_dataset("cifar100", "x", "y", root=tmp_path, label_mode="medium")


def test_cifar_wrong_length_and_bad_label(tmp_path, rng):
    make_cifar10(tmp_path, rng)
    path = tmp_path / "data_batch_3.bin"
    _damage(path, lambda r: r[:-100])
    with pytest.raises(CorruptFileError) as err:
        datasets.load_dataset("cifar10", "x", "y", root=tmp_path)
    assert str(path) in str(err.value) and "is not a whole, non-zero number of 3073-byte records" in str(err.value)
    make_cifar10(tmp_path, rng)
    _damage(path, lambda r: r[:3073] + bytes([200]) + r[3074:])
    with pytest.raises(CorruptFileError, match=r"data_batch_3.bin' at byte offset 3073: label byte 0 of record 1 "
                                                r"is 200, not a class in 0..9"):
        datasets.load_dataset("cifar10", "x", "y", root=tmp_path)


def test_cifar_missing_batch_named(tmp_path, rng):
    make_cifar10(tmp_path, rng)
    os.remove(tmp_path / "data_batch_5.bin")
    with pytest.raises(MissingDatasetError) as err:
        datasets.load_dataset("cifar10", "x", "y", root=tmp_path)
    assert str(tmp_path / "data_batch_5.bin") in str(err.value)
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz" in str(err.value)
    with pytest.raises(MissingDatasetError, match="cifar-100-binary.tar.gz"):
        datasets.load_dataset("cifar100", "x", "y", root=tmp_path / "none")


# -------------------------------------------------------------------------------- image folders


def test_image_folder_round_trip(tmp_path, rng):
    made = make_image_folder(tmp_path, rng)
    train, test = datasets.load_dataset("imagefolder", "x", "y", root=tmp_path)
    assert train.class_names == ["cat", "dog", "eel"] and len(train) == 6 and len(test) == 6
    got = train[np.arange(6)]
    assert got["x"].shape == (6, 3, 6, 5) and got["x"].dtype == np.float32
    for i, (path, cls, pixels) in enumerate(made["train"]):
        assert train.files[i] == path
        np.testing.assert_array_equal(got["x"][i], pixels.transpose(2, 0, 1) / np.float32(255))
        assert got["y"][i] == ["cat", "dog", "eel"].index(cls)
    assert datasets.dataset_shape("imagefolder", root=tmp_path) == (3, 3, 6, 5)


def test_image_folder_resize_and_grayscale(tmp_path, rng):
    from PIL import Image

    made = make_image_folder(tmp_path, rng, sizes={("train", "dog", 1): (9, 4)}, classes=("a", "dog"))
    with pytest.raises(UserError, match=r"img1.png' is 4x9 \(WxH\) but the images before it are 5x6.*image_size"):
        datasets.load_dataset("imagefolder", "x", "y", root=tmp_path)[0][np.arange(4)]
    train, _ = datasets.load_dataset("imagefolder", "x", "y", root=tmp_path, image_size=(4, 3))
    path, _, pixels = made["train"][3]
    expected = np.asarray(Image.fromarray(pixels).resize((3, 4), Image.BILINEAR)).transpose(2, 0, 1) / np.float32(255)
    np.testing.assert_array_equal(train[3]["x"], expected)
    gray, _ = datasets.load_dataset("imagefolder", "x", "y", root=tmp_path, image_size=7, channels=1)
    assert gray[np.arange(2)]["x"].shape == (2, 1, 7, 7)
    expected = np.asarray(Image.fromarray(made["train"][0][2]).convert("L").resize((7, 7), Image.BILINEAR))
    np.testing.assert_array_equal(gray[0]["x"][0], expected / np.float32(255))
    assert datasets.dataset_shape("imagefolder", root=tmp_path, image_size=7, channels=1) == (2, 1, 7, 7)


def test_image_folder_errors(tmp_path, rng, monkeypatch):
    with pytest.raises(MissingDatasetError, match=r"ImageNet layout ROOT/train/<class>/<image>.*" +
                       str(tmp_path / "train").replace("/", ".") + "' does not exist.*image-net.org"):
        datasets.load_dataset("imagefolder", "x", "y", root=tmp_path)
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path / "data"))
    with pytest.raises(MissingDatasetError, match="The classes and image size come from these files: pass root=DIR"):
        datasets.dataset_shape("imagefolder")
    make_image_folder(tmp_path, rng)
    os.makedirs(tmp_path / "val" / "zebra")
    with pytest.raises(UserError, match=r"class folder\(s\) \['zebra'\] that the training split does not have"):
        datasets.load_dataset("imagefolder", "x", "y", root=tmp_path)
    os.rmdir(tmp_path / "val" / "zebra")
    bad = tmp_path / "train" / "dog" / "img0.png"
    _damage(bad, lambda r: r[:-30])
    train, _ = datasets.load_dataset("imagefolder", "x", "y", root=tmp_path)
    with pytest.raises(CorruptFileError, match=str(bad).replace("/", ".") + "'.*cannot be decoded"):
        train[np.arange(len(train))]
    _damage(bad, lambda r: b"garbage" * 10)
    with pytest.raises(CorruptFileError, match="cannot identify it as an image"):
        train[2]


# -------------------------------------------------------------------------------- digits, synthetic, options


def test_digits_match_scikit_learn():
    from sklearn.datasets import load_digits

    train, test = datasets.load_dataset("digits", "x", "y")
    d = load_digits()
    assert len(train) + len(test) == len(d.target)
    xs = np.concatenate([train.data, test.data])[:, 0]
    # The same images, in another order: compare sorted row sums and the multiset of labels.
    np.testing.assert_allclose(np.sort(xs.reshape(len(xs), -1).sum(1)), np.sort(d.images.reshape(len(xs), -1).sum(1))
                               / 16, rtol=1e-6)
    np.testing.assert_array_equal(np.bincount(np.concatenate([train.labels, test.labels])), np.bincount(d.target))
    assert datasets.dataset_shape("digits") == (10, 1, 8, 8)
    with pytest.raises(UserError, match="reads no files, so root= does not apply"):
        datasets.load_dataset("digits", "x", "y", root="/data")


def test_synthetic_any_shape_seeded_and_learnable():
    a, at = datasets.load_dataset("synthetic", "x", "y", shape=(3, 5, 4), classes=4, train_size=400, test_size=100,
                                  seed=7)
    b, _ = datasets.load_dataset("synthetic", "x", "y", shape=(3, 5, 4), classes=4, train_size=400, test_size=100,
                                 seed=7)
    c, _ = datasets.load_dataset("synthetic", "x", "y", shape=(3, 5, 4), classes=4, train_size=400, test_size=100,
                                 seed=8)
    assert len(a) == 400 and len(at) == 100
    batch = a[np.arange(400)]
    assert batch["x"].shape == (400, 3, 5, 4) and batch["x"].dtype == np.float32 and batch["y"].dtype == np.int64
    assert set(np.unique(batch["y"])) == {0, 1, 2, 3}
    np.testing.assert_array_equal(batch["x"], b[np.arange(400)]["x"])
    assert not np.array_equal(batch["x"], c[np.arange(400)]["x"])
    # Nearest class mean, computed here, classifies the test split well above chance.
    means = np.stack([batch["x"][batch["y"] == k].mean(0).ravel() for k in range(4)])
    xt = at[np.arange(100)]
    pred = np.argmin(((xt["x"].reshape(100, 1, -1) - means[None]) ** 2).sum(-1), 1)
    assert (pred == xt["y"]).mean() > 0.9
    assert datasets.dataset_shape("synthetic", shape=(3, 5, 4), classes=4) == (4, 3, 5, 4)
    assert datasets.dataset_shape("synthetic") == (10, 1, 28, 28)


@pytest.mark.parametrize("kwargs,fragment", [
    ({"shape": (0, 3)}, "shape must be a non-empty sequence of positive integers"),
    ({"classes": 1}, "classes must be an integer >= 2. Received: 1"),
    ({"train_size": 0}, "train_size must be an integer >= 1"),
    ({"colour": True}, "Dataset 'synthetic' has no option(s) ['colour']. Its options are 'seed', 'shape'"),
])
def test_bad_options(kwargs, fragment):
    with pytest.raises(UserError) as err:
        datasets.load_dataset("synthetic", "x", "y", **kwargs)
    assert fragment in str(err.value)


def test_unknown_dataset():
    with pytest.raises(UserError, match=r"Unknown dataset 'imagenat'. Known datasets: 'cifar10', 'cifar100', "
                                        r"'digits', 'fashion_mnist', 'imagefolder', 'mnist', 'shards', 'synthetic'"):
        datasets.dataset_shape("imagenat")


@pytest.mark.parametrize("name", ["imagenet", "ucf101"])
def test_deep500s_datasets_without_a_loader_here_are_an_import_error(name):
    # Deep500's dataset_latency sample skips a dataset on ImportError
    with pytest.raises(ImportError, match=f"no loader for Deep500's dataset '{name}'.*'imagefolder'.*'shards'"):
        datasets.load_dataset(name, "in", "label", batch_size=128)
    with pytest.raises(ImportError, match=name):
        datasets.dataset_shape(name)


def test_readers_name_a_missing_or_unreadable_file(tmp_path):
    missing = tmp_path / "nothing-idx3-ubyte"
    for read in (datasets.read_idx, lambda p: datasets.read_cifar_batch(p, 1, (10,))):
        with pytest.raises(MissingDatasetError, match=f"'{missing}' does not exist.*Received: '{missing}'") as err:
            read(missing)
        assert isinstance(err.value, FileNotFoundError)
        with pytest.raises(UserError, match=f"Dataset file '{tmp_path}' is a folder, not a regular file"):
            read(tmp_path)  # a folder
    with pytest.raises(MissingDatasetError, match="Image folder '.*nope' does not exist"):
        datasets.formats.scan_image_folder(str(tmp_path / "nope"))


def test_bad_dataset_arguments_are_user_errors():
    from deep500lite.errors import UserTypeError

    with pytest.raises(UserTypeError, match="holds uint8 images. Received: dtype float32"):
        datasets.UInt8ImageDataset(np.zeros((2, 1, 2, 2), np.float32), "x", np.zeros(2), "y")
    with pytest.raises(UserError, match="one label per image. Received: 2 images, 3 labels"):
        datasets.UInt8ImageDataset(np.zeros((2, 1, 2, 2), np.uint8), "x", np.zeros(3), "y")
    from deep500lite.lv2.dataset import NumpyDataset

    with pytest.raises(UserError, match="one label per sample. Received: 2 samples, 1 labels"):
        NumpyDataset(np.zeros((2, 3)), "x", np.zeros(1), "y")
    with pytest.raises(UserError, match="no label_node"):
        NumpyDataset(np.zeros((2, 3)), "x", np.zeros(2))
    with pytest.raises(UserError, match="synthetic: classes must be an integer >= 2. Received: 'ten'"):
        datasets.dataset_shape("synthetic", classes="ten")
    with pytest.raises(UserError, match="separation must be a number. Received: 'far'"):
        datasets.load_dataset("synthetic", "x", "y", separation="far")
    with pytest.raises(UserError, match=r"test_fraction must be in \(0, 1\). Received: '0.5'"):
        datasets.load_dataset("digits", "x", "y", test_fraction="0.5")
