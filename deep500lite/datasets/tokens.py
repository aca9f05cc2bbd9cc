"""``synthetic_tokens``: generated sequences of int64 token ids with class labels, for text models.

Nothing is read or downloaded. Each class owns a few "keyword" tokens; a sample is ``seq_len``
token ids drawn uniformly from ``[1, vocab_size)`` in which each position after the first is
replaced, with probability ``signal``, by one of its class's keywords, so a sequence classifier
such as the zoo's ``bert`` can learn the classes. The first token of every sequence is 0 (the
place of BERT's ``[CLS]``). Labels are int64 class indices.
"""

from __future__ import annotations

import numpy as np

from deep500lite.datasets.common import check_generated_size, check_seed
from deep500lite.errors import UserError
from deep500lite.lv2.dataset import NumpyDataset

__all__ = ["synthetic_tokens", "synthetic_tokens_shape"]

_KEYWORDS = 16  # keyword tokens per class


def synthetic_tokens_shape(seq_len=128, classes=2, vocab_size=30522, train_size=1, test_size=1,
                           signal=0.5) -> tuple:
    """Check the options of :func:`synthetic_tokens`; returns ``(classes, seq_len)``.

    Raises:
        UserError: an option out of range.
    """
    for key, value, low in (("seq_len", seq_len, 1), ("classes", classes, 2), ("vocab_size", vocab_size, 2),
                            ("train_size", train_size, 1), ("test_size", test_size, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise UserError(f"synthetic_tokens: {key} must be an integer >= {low}. Received: {key}={value!r}")
    if isinstance(signal, bool) or not isinstance(signal, (int, float, np.integer, np.floating)) \
            or not 0 <= signal <= 1:
        raise UserError(f"synthetic_tokens: signal must be a number from 0 to 1. Received: signal={signal!r}")
    # the keyword table holds 16 int64 ids per class: refuse a table that cannot fit before it is drawn
    check_generated_size(8 * _KEYWORDS * int(classes), f"synthetic_tokens (classes {classes}: the keyword table)")
    if classes > 2**31 - 1 or vocab_size > 2**62 or seq_len > 2**31 - 1:
        raise UserError(f"synthetic_tokens: classes and seq_len must be at most 2,147,483,647 and vocab_size at most "
                        f"2**62. Received: classes={classes!r}, seq_len={seq_len!r}, vocab_size={vocab_size!r}")
    return int(classes), int(seq_len)


def synthetic_tokens(input_node: str, label_node: str, root=None, seed=0, seq_len=128, classes=2, vocab_size=30522,
                     train_size=1024, test_size=256, signal=0.5):
    """Generated token-id sequences as ``(train, test)`` datasets.

    Args:
        input_node: the network input the token ids (int64 ``[N, seq_len]``) feed.
        label_node: the network input the labels (int64 ``[N]``) feed.
        root: not used (must be None; nothing is read).
        seed: seed of the generator (same seed, same data).
        seq_len: tokens per sequence.
        classes: number of classes.
        vocab_size: token ids are in ``[0, vocab_size)``.
        train_size: training sequences.
        test_size: test sequences.
        signal: the probability that a position holds one of its class's keywords.

    Raises:
        UserError: a root folder, or an option out of range.
    """
    if root is not None:
        raise UserError(f"synthetic_tokens is generated and reads no files: leave root unset. Received: root={root!r}")
    synthetic_tokens_shape(seq_len, classes, vocab_size, train_size, test_size, signal)
    check_seed(seed, "synthetic_tokens")
    # int64 ids, keyword picks and float64 draws for each position: about 32 bytes per token at the peak
    check_generated_size(32 * seq_len * max(train_size, test_size),
                         f"synthetic_tokens (seq_len {seq_len}, train_size {train_size}, test_size {test_size})")
    rng = np.random.default_rng(seed)
    keywords = rng.integers(1, vocab_size, size=(classes, _KEYWORDS))

    def make(n):
        y = rng.integers(0, classes, size=n).astype(np.int64)
        x = rng.integers(1, vocab_size, size=(n, seq_len)).astype(np.int64)
        picks = keywords[y[:, None], rng.integers(0, _KEYWORDS, size=(n, seq_len))]
        x = np.where(rng.random((n, seq_len)) < signal, picks, x).astype(np.int64)
        x[:, 0] = 0
        return x, y

    (xa, ya), (xb, yb) = make(int(train_size)), make(int(test_size))
    return NumpyDataset(xa, input_node, ya, label_node), NumpyDataset(xb, input_node, yb, label_node)
