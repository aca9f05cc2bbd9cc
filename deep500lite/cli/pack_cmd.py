"""``deep500lite pack``: write any dataset as packed shard files (one file per split, memory-mapped)."""

from __future__ import annotations

import ast
import difflib
import os
import sys

from deep500lite.cli.args import Integer, Parsed, Path, Text, positive_int
from deep500lite.errors import UserError, format_choices

__all__ = ["add_parser", "run", "resolve_source"]

SPLITS = ("train", "test", "both")


_SIDE = Integer(minimum=1, maximum=65536)


def _image_size(text):
    parts = text.lower().replace(",", "x").split("x")
    try:
        size = [_SIDE.parse(p) for p in parts]
    except UserError:
        size = []
    if len(size) not in (1, 2):
        raise UserError(f"must be N or HxW with integers from 1 to 65,536 (e.g. 224 or 224x224). Received: {text!r}")
    return tuple(size * 2 if len(size) == 1 else size)


def _option(text):
    key, sep, value = Text().parse(text).partition("=")
    if not sep or not key.isidentifier():
        raise UserError(f"must be KEY=VALUE with KEY a Python identifier (e.g. shape=[3,32,32]). Received: {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return key, value  # a plain string, e.g. label_mode=coarse


def add_parser(subparsers):
    p = subparsers.add_parser(
        "pack", help="write a dataset as packed shard files for fast random access",
        description=("Read a dataset (a name known to `deep500lite list datasets`, or a folder holding MNIST IDX "
                     "files, CIFAR binary batches, an image folder or shards) and write OUT/train.d5shard and/or "
                     "OUT/test.d5shard: fixed-size records in one file, memory-mapped when read. Load them with "
                     "load_dataset('shards', ..., root=OUT)."))
    p.add_argument("source", type=Path("input-or-name"), metavar="NAME_OR_DIR",
                   help="a dataset name (digits, mnist, cifar10, ...) or a folder holding a dataset's files")
    p.add_argument("out", type=Path("folder"), metavar="OUT", help="the folder to write train.d5shard and test.d5shard in")
    p.add_argument("--root", type=Path("folder"), default=None, metavar="DIR",
                   help="the folder of a dataset given by NAME (default: $DEEP500LITE_DATA/NAME or "
                        "~/.cache/deep500lite/data/NAME)")
    p.add_argument("--split", choices=SPLITS, default="both", help="which split(s) to write (default both)")
    p.add_argument("--dtype", choices=("keep", "uint8"), default="keep",
                   help="keep: store samples in their own dtype (default); uint8: store images in [0, 1] as "
                        "round(x*255), a quarter of float32 (exact for MNIST/CIFAR), read back as float32 x/255")
    p.add_argument("--image-size", type=Parsed(_image_size, "N or HxW, integers from 1 to 65,536", "text"), default=None, metavar="HxW",
                   help="resize the images of an image folder to HxW (or NxN)")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help="write only the first N samples of each split")
    p.add_argument("--option", type=Parsed(_option, "KEY=VALUE, KEY a Python identifier"), action="append", default=[], metavar="KEY=VALUE",
                   help="a dataset option, repeatable, VALUE read as a Python literal "
                        "(e.g. --option shape=[3,32,32] --option train_size=5000)")
    p.add_argument("--batch-size", type=positive_int, default=1024, metavar="N",
                   help="samples read from the dataset at a time (default 1024)")
    p.set_defaults(func=run)
    return p


def resolve_source(source: str, root: str | None):
    """``(dataset name, root)`` for a NAME_OR_DIR argument and ``--root``."""
    from deep500lite.datasets import detect_dataset, list_datasets

    explicit_path = os.sep in source or (os.altsep is not None and os.altsep in source)
    if source in list_datasets() and not explicit_path:
        if root is None and os.path.isdir(source) and detect_dataset(source) is not None:
            raise UserError(f"'{source}' is both a dataset name and a folder here holding a dataset; say which: "
                            f"./{source} for the folder, or '{source} --root DIR' for the dataset. "
                            f"Received: {source!r}")
        return source, root
    if os.path.isdir(source):
        if root is not None:
            raise UserError(f"--root applies to a dataset NAME; '{source}' is already a folder. "
                            f"Received: --root {root}")
        name = detect_dataset(source)
        if name is None:
            entries = sorted(os.listdir(source))
            held = format_choices(entries[:8]) + (", ..." if len(entries) > 8 else "") if entries else "nothing"
            raise UserError(f"Folder '{source}' holds no dataset deep500lite recognizes: expected "
                            "train-images-idx3-ubyte[.gz] (MNIST/Fashion-MNIST), data_batch_1.bin (CIFAR-10), "
                            "train.bin (CIFAR-100), train/<class>/<image> (image folder) or train.d5shard. "
                            f"Received: '{source}' holding {held}")
        return name, source
    close = difflib.get_close_matches(source, list_datasets(), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UserError(f"NAME_OR_DIR must be a dataset name ({format_choices(list_datasets())}) or an existing "
                    f"folder.{hint} Received: {source!r}")


def run(args) -> int:
    import numpy as np

    from deep500lite.datasets import dataset_shape, load_dataset, verify_shard, write_shards
    from deep500lite.datasets.shards import shard_path

    name, root = resolve_source(args.source, args.root)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UserError(f"OUT must be a folder to write train.d5shard and test.d5shard in; '{args.out}' is a file. "
                        f"Received: {args.out!r}")
    options = dict(args.option)
    if name == "shards":
        # Re-packing shards writes fresh CRCs, so the old ones are checked while reading, or a damaged
        # record would be carried over with a valid checksum.
        options.setdefault("verify", True)
    if args.image_size is not None:
        options["image_size"] = args.image_size
    train, test = load_dataset(name, "input", "label", root=root, **options)
    classes = dataset_shape(name, root=root, **options)[0]
    splits = ["train", "test"] if args.split == "both" else [args.split]
    for split in splits:
        dataset = train if split == "train" else test
        path = shard_path(args.out, split)
        total = len(dataset) if args.limit is None else min(args.limit, len(dataset))

        every = max(args.batch_size, total // 10)

        def progress(done, count, split=split, every=every):
            if done == count or done % every < args.batch_size:
                print(f"... {split}: {done}/{count} samples", file=sys.stderr, flush=True)

        header = write_shards(dataset, path, batch_size=args.batch_size,
                              image_dtype=None if args.dtype == "keep" else "uint8", classes=classes,
                              source={"dataset": name, "root": os.path.abspath(root) if root else None,
                                      "split": split, "options": {k: repr(v) for k, v in options.items()}},
                              limit=args.limit, progress=progress if total > args.batch_size else None)
        verify_shard(path)
        x, y = header["fields"][0], header["fields"][1] if len(header["fields"]) > 1 else None
        stored = f"{np.dtype(x['dtype']).name}{x['shape']}"
        if "divisor" in x:
            stored += f" (read as float32 / {x['divisor']}, max error {header['quantization_max_error']:.2g})"
        labels = f" + {np.dtype(y['dtype']).name} labels" if y else ""
        size = os.path.getsize(path)
        ranged = y and header["classes"] and np.dtype(y["dtype"]).kind in "iu"  # what verify_shard checks
        print(f"{split}: {header['count']} samples of {stored}{labels}, {header['classes']} classes -> {path} "
              f"({size / 2**20:.1f} MiB; re-read: header and {header['count']} record CRC-32s match what was "
              f"written{', labels in 0..' + str(header['classes'] - 1) if ranged else ''})")
    checked = _SOURCE_CHECKS.get(name, "nothing beyond the sample shapes")
    if name == "shards" and options.get("verify") is not True:
        checked = "the header only (verify=False: the source's record CRC-32s were not checked)"
    print(f"checked while reading the source: {checked}. "
          "The CRC-32s above prove the shard holds what was written; they cannot tell wrong values in the "
          "source.")
    return 0


# What each source's reader checks, as the summary states it (and no more).
_SOURCE_CHECKS = {
    "mnist": "IDX magic numbers and lengths, labels in 0..9, the gzip CRC-32 of .gz files",
    "fashion_mnist": "IDX magic numbers and lengths, labels in 0..9, the gzip CRC-32 of .gz files",
    "cifar10": "file lengths and label ranges (CIFAR files carry no checksum)",
    "cifar100": "file lengths and label ranges (CIFAR files carry no checksum)",
    "imagefolder": "that every image decodes",
    "shards": "the header and every record's CRC-32 (source opened with verify=True)",
    "digits": "nothing (scikit-learn's bundled data)",
    "synthetic": "nothing (generated)",
    "synthetic_tokens": "nothing (generated)",
}
