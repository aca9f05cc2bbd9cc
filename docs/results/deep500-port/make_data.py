"""Stand-in data for the trial port: scikit-learn's digits, shifted copies for size, in the samples' formats."""
import os, sys, struct
import numpy as np
from sklearn.datasets import load_digits

root = sys.argv[1]
d = load_digits()
img = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)
lab = d.target.astype(np.uint8)
n_test = 400
tr_x, tr_y, te_x, te_y = img[:-n_test], lab[:-n_test], img[-n_test:], lab[-n_test:]

def canvas(x, size, scale, dy=0, dx=0):
    big = x.repeat(scale, axis=1).repeat(scale, axis=2)
    pad = (size - big.shape[1]) // 2
    out = np.zeros((len(x), size, size), np.uint8)
    out[:, pad + dy:pad + dy + big.shape[1], pad + dx:pad + dx + big.shape[2]] = big
    return out

def shifted(x, y, size, scale, n):
    xs, ys = [], []
    for dy in (0, -2, 2):
        for dx in (0, -2, 2):
            xs.append(canvas(x, size, scale, dy, dx)); ys.append(y)
    return np.concatenate(xs)[:n], np.concatenate(ys)[:n]

def idx(a):
    a = np.ascontiguousarray(a, np.uint8)
    return bytes([0, 0, 8, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.tobytes()

for name in ("mnist", "fashion_mnist"):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    x, y = shifted(tr_x, tr_y, 28, 3, 12000)
    for pre, xx, yy in (("train", x, y), ("t10k", canvas(te_x, 28, 3), te_y)):
        open(os.path.join(root, name, f"{pre}-images-idx3-ubyte"), "wb").write(idx(xx))
        open(os.path.join(root, name, f"{pre}-labels-idx1-ubyte"), "wb").write(idx(yy))

def rgb(x):
    return np.repeat(x[:, None], 3, axis=1).reshape(len(x), -1)

os.makedirs(os.path.join(root, "cifar10"), exist_ok=True)
os.makedirs(os.path.join(root, "cifar100"), exist_ok=True)
x, y = shifted(tr_x, tr_y, 32, 3, 10000)
parts = np.array_split(np.arange(len(y)), 5)
for i, p in enumerate(parts, 1):
    rec = np.concatenate([y[p].reshape(-1, 1), rgb(x[p])], axis=1).astype(np.uint8)
    open(os.path.join(root, "cifar10", f"data_batch_{i}.bin"), "wb").write(rec.tobytes())
tx = canvas(te_x, 32, 3)
open(os.path.join(root, "cifar10", "test_batch.bin"), "wb").write(
    np.concatenate([te_y.reshape(-1, 1), rgb(tx)], axis=1).astype(np.uint8).tobytes())
for name, xx, yy in (("train.bin", x, y), ("test.bin", tx, te_y)):
    rec = np.concatenate([(yy // 5).reshape(-1, 1), yy.reshape(-1, 1), rgb(xx)], axis=1).astype(np.uint8)
    open(os.path.join(root, "cifar100", name), "wb").write(rec.tobytes())
print("data in", root, "mnist train 12000, cifar train 10000, test 400")
