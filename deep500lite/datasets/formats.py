"""Readers of the classic dataset file formats: IDX (MNIST), CIFAR binary batches, image folders.

Every reader checks what it reads and raises :class:`~deep500lite.datasets.common.CorruptFileError`
naming the file and the fault (bad magic number, wrong length, bad gzip CRC, out-of-range label).
Pillow is imported only when an image folder is read.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib

import numpy as np

from deep500lite.datasets.common import CorruptFileError, read_file_bytes
from deep500lite.errors import FrameworkNotAvailableError, MissingDatasetError, UserError
from deep500lite.input_files import input_path, open_input
from deep500lite.lv2.dataset import Dataset
from deep500lite.utils import check_allocation

__all__ = ["read_idx", "read_gzip_or_plain", "read_cifar_batch", "IMAGE_EXTENSIONS",
           "ImageFolderDataset", "scan_image_folder", "CIFAR_IMAGE_BYTES"]

# IDX type byte -> big-endian numpy dtype (http://yann.lecun.com/exdb/mnist/, bottom of the page).
_IDX_TYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
CIFAR_IMAGE_BYTES = 3 * 32 * 32
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".gif", ".tif", ".tiff", ".webp")


def read_gzip_or_plain(path) -> bytes:
    """The bytes of ``path``, decompressed when it is gzip (recognized by its magic bytes, not its name).

    Raises:
        CorruptFileError: a gzip stream that is truncated or fails its CRC-32/length check.
        MissingDatasetError: ``path`` does not exist.
    """
    raw = read_file_bytes(path)
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except EOFError as exc:
        raise CorruptFileError(path, f"the gzip stream is truncated ({exc})") from exc
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise CorruptFileError(path, f"the gzip stream is damaged ({exc})") from exc


def _open_maybe_gzip(path):
    """``path`` opened for reading, through a gzip decoder when it starts with the gzip magic bytes."""
    raw = open_input(path, "Dataset file", missing=MissingDatasetError)
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw), raw
    raw.seek(0)
    return raw, raw


def read_idx(path) -> np.ndarray:
    """Read an IDX file (the format of MNIST and Fashion-MNIST), plain or gzip-compressed.

    The file is a 4-byte magic number ``0x00 0x00 TYPE NDIM``, NDIM big-endian uint32 dimensions,
    then the data, big-endian, in C order. The header is read first: the size it declares is
    checked against the memory available before the data is read (and decompressed), so a header
    declaring terabytes is refused up front.

    Args:
        path: the file.

    Returns:
        The array, in native byte order (uint8 for ``ubyte`` files).

    Raises:
        CorruptFileError: bad magic number, unknown type byte, a damaged gzip stream, dimensions
            larger than the memory, or a data length that does not match the dimensions in the header.
        MissingDatasetError: ``path`` does not exist.
    """
    stream, raw = _open_maybe_gzip(path)
    try:
        with raw:
            return _read_idx_stream(input_path(path, "Dataset file"), stream)
    except EOFError as exc:
        raise CorruptFileError(path, f"the gzip stream is truncated ({exc})") from exc
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise CorruptFileError(path, f"the gzip stream is damaged ({exc})") from exc


def _read_idx_stream(path: str, f) -> np.ndarray:
    head = f.read(4)
    if len(head) < 4:
        raise CorruptFileError(path, f"wrong length: {len(head)} bytes, shorter than the 4-byte IDX magic number")
    magic = int.from_bytes(head, "big")
    if head[0] != 0 or head[1] != 0 or head[2] not in _IDX_TYPES:
        raise CorruptFileError(path, f"bad magic number 0x{magic:08X}: an IDX file starts with 0x0000, a type "
                                     f"byte (0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E) and the number of dimensions",
                               offset=0)
    dtype, ndim = _IDX_TYPES[head[2]], head[3]
    header = 4 + 4 * ndim
    raw_dims = f.read(4 * ndim)
    if len(raw_dims) < 4 * ndim:
        raise CorruptFileError(path, f"wrong length: {4 + len(raw_dims)} bytes, shorter than the {header}-byte "
                                     f"header of an IDX file with {ndim} dimensions")
    dims = struct.unpack(f">{ndim}I", raw_dims)
    expected = math.prod(dims) * dtype.itemsize  # Python integers: no overflow however large the dims
    check_allocation(expected, f"the data of IDX file '{path}' (dimensions {list(dims)} of {dtype.itemsize}-byte "
                               "values)", error=lambda message: CorruptFileError(path, message, offset=4))
    parts, left = [], expected
    while left:  # bounded reads: a short stream is seen before a buffer of the declared size exists
        chunk = f.read(min(left, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    data = b"".join(parts)
    extra = f.read(1)
    found = len(data) + len(extra)
    if len(data) < expected or extra:
        what = "truncated" if found < expected else "followed by extra bytes"
        shown = found if found < expected else "more"
        raise CorruptFileError(path, f"wrong length: the header declares dimensions {list(dims)} of "
                                     f"{dtype.itemsize}-byte values, {expected} bytes of data, but the file has "
                                     f"{shown} ({what})", offset=header + min(found, expected))
    array = np.frombuffer(data, dtype=dtype).reshape(dims)
    return np.array(array, dtype=dtype.newbyteorder("="))


def read_cifar_batch(path, label_bytes: int, classes: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Read a CIFAR binary batch: records of ``label_bytes`` label bytes and 3072 image bytes.

    Each image is 1024 red, 1024 green, then 1024 blue bytes, each plane 32 rows of 32.

    Args:
        path: the ``.bin`` file.
        label_bytes: 1 for CIFAR-10 (the class), 2 for CIFAR-100 (coarse, then fine).
        classes: the number of classes of each label byte, for the range check.

    Returns:
        ``(images, labels)``: uint8 ``(N, 3, 32, 32)`` and uint8 ``(N, label_bytes)``.

    Raises:
        CorruptFileError: a length that is not a whole number of records, or a label out of range.
        MissingDatasetError: ``path`` does not exist.
    """
    record = label_bytes + CIFAR_IMAGE_BYTES
    raw = read_file_bytes(path)
    if not raw or len(raw) % record:
        raise CorruptFileError(path, f"wrong length: {len(raw)} bytes is not a whole, non-zero number of "
                                     f"{record}-byte records ({label_bytes} label byte(s) + {CIFAR_IMAGE_BYTES} "
                                     f"image bytes); the file is truncated or not a CIFAR binary batch",
                               offset=len(raw) - len(raw) % record)
    table = np.frombuffer(raw, dtype=np.uint8).reshape(-1, record)
    labels = table[:, :label_bytes]
    for j, n in enumerate(classes):
        bad = np.flatnonzero(labels[:, j] >= n)
        if len(bad):
            i = int(bad[0])
            raise CorruptFileError(path, f"label byte {j} of record {i} is {labels[i, j]}, not a class in "
                                         f"0..{n - 1}; the file is damaged or not this CIFAR variant",
                                   offset=i * record + j)
    images = table[:, label_bytes:].reshape(-1, 3, 32, 32)
    return images.copy(), labels.copy()


def scan_image_folder(folder: str, classes: list[str] | None = None) -> tuple[list[str], list[str], np.ndarray]:
    """List the images of an ImageNet-layout split folder, ``folder/<class>/<image>``.

    Args:
        folder: the split folder (``root/train`` or ``root/val``).
        classes: the class names to use (those of the training split); None to take the sorted
            subfolder names of ``folder``.

    Returns:
        ``(classes, files, labels)``: class names, image paths sorted by class then name, int64 labels.

    Raises:
        UserError: a class folder unknown to ``classes``, no image at all, or ``folder`` not a readable folder.
        MissingDatasetError: ``folder`` does not exist.
    """
    try:
        found = sorted(e.name for e in os.scandir(folder) if e.is_dir())
    except FileNotFoundError as exc:
        raise MissingDatasetError(f"Image folder '{folder}' does not exist; it must hold <class>/<image>. "
                                  f"Received: {folder!r}") from exc
    except OSError as exc:
        raise UserError(f"Cannot list image folder '{folder}': {exc.strerror or exc}; it must be a readable folder "
                        f"holding <class>/<image>. Received: {folder!r}") from exc
    if classes is None:
        classes = found
    index = {c: i for i, c in enumerate(classes)}
    unknown = [c for c in found if c not in index]
    if unknown:
        raise UserError(f"Image folder '{folder}' has class folder(s) {unknown[:5]} that the training split "
                        f"does not have; the classes are {classes[:10]}{' ...' if len(classes) > 10 else ''}. "
                        f"Received: class folders {found[:10]}{' ...' if len(found) > 10 else ''}")
    files, labels = [], []
    for c in found:
        names = sorted(n for n in os.listdir(os.path.join(folder, c)) if n.lower().endswith(IMAGE_EXTENSIONS))
        files += [os.path.join(folder, c, n) for n in names]
        labels += [index[c]] * len(names)
    if not files:
        raise UserError(f"Image folder '{folder}' holds no images: expected {folder}/<class>/<image> with "
                        f"extensions {', '.join(IMAGE_EXTENSIONS)}. Received: {folder!r}")
    return classes, files, np.asarray(labels, dtype=np.int64)


class ImageFolderDataset(Dataset):
    """Images read from files on access with Pillow, served as float32 ``(C, H, W)`` in [0, 1].

    Args:
        files: image paths.
        labels: one int64 label per file.
        input_node: the network input the images feed.
        label_node: the network input the labels feed.
        classes: the class names (index = label).
        image_size: ``(H, W)`` to resize every image to (bilinear), or None to keep the size, in
            which case every image must have the size of the first.
        channels: 3 (RGB) or 1 (grayscale); images are converted.
    """

    def __init__(self, files: list[str], labels: np.ndarray, input_node: str, label_node: str,
                 classes: list[str], image_size=None, channels: int = 3):
        super().__init__(input_node, label_node)
        if channels not in (1, 3):
            raise UserError(f"channels must be 1 (grayscale) or 3 (RGB). Received: {channels!r}")
        self.files, self.labels = list(files), np.asarray(labels, dtype=np.int64)
        self.class_names, self.channels = list(classes), channels
        self.classes = len(self.class_names)
        self.image_size = _image_size(image_size)
        if self.image_size is not None:
            h, w = self.image_size
            check_allocation(4 * h * w * channels, f"one image resized to image_size {h}x{w} (float32)")
        self._expected = self.image_size

    def sample_shape(self) -> tuple:
        """``(C, H, W)`` of every sample (opens the first image when no ``image_size`` was given)."""
        if self._expected is None:
            self._expected = self._load(0).shape[1:]
        return (self.channels, *self._expected)

    def _load(self, i: int) -> np.ndarray:
        try:
            from PIL import Image, UnidentifiedImageError
        except ImportError as exc:
            raise FrameworkNotAvailableError("Reading an image folder needs Pillow, which is not installed: "
                                             "pip install 'deep500lite[datasets]'") from exc

        path = self.files[i]
        try:
            with open_input(path, "Image file", missing=MissingDatasetError) as f, Image.open(f) as im:
                im = im.convert("RGB" if self.channels == 3 else "L")
                if self.image_size is not None and im.size != (self.image_size[1], self.image_size[0]):
                    im = im.resize((self.image_size[1], self.image_size[0]), Image.BILINEAR)
                arr = np.asarray(im, dtype=np.uint8)
        except UnidentifiedImageError as exc:
            raise CorruptFileError(path, "Pillow cannot identify it as an image (bad magic number or not an "
                                         "image)") from exc
        except (OSError, SyntaxError, ValueError) as exc:
            raise CorruptFileError(path, f"the image cannot be decoded ({exc})") from exc
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        if self._expected is None:
            self._expected = arr.shape[1:]
        elif arr.shape[1:] != tuple(self._expected):
            raise UserError(f"Image '{path}' is {arr.shape[2]}x{arr.shape[1]} (WxH) but the images before it "
                            f"are {self._expected[1]}x{self._expected[0]}; pass image_size=(H, W) (CLI: "
                            "--image-size HxW) to resize every image to one size. "
                            f"Received: {arr.shape[2]}x{arr.shape[1]}")
        return arr

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            x = self._load(int(index)).astype(np.float32) / np.float32(255)
            return {self.input_node: x, self.label_node: self.labels[index]}
        idx = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index)
        x = np.stack([self._load(int(i)) for i in idx]) if len(idx) else np.zeros((0, *self.sample_shape()),
                                                                                   np.uint8)
        return {self.input_node: x.astype(np.float32) / np.float32(255), self.label_node: self.labels[idx]}

    def __len__(self):
        return len(self.files)


def _image_size(size):
    if size is None:
        return None
    if isinstance(size, (int, np.integer)):
        size = (size, size)
    try:
        h, w = (int(s) for s in size)
    except (TypeError, ValueError):
        raise UserError(f"image_size must be an integer or (height, width). Received: {size!r}") from None
    if h < 1 or w < 1:
        raise UserError(f"image_size must be positive. Received: {size!r}")
    return (h, w)
