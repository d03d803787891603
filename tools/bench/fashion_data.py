"""Fashion-MNIST for the Python peers of tools/bench: reads the IDX files (gzip or raw)
into raw bytes that each peer turns into its own tensors (and normalises with the
training set's pixel mean and standard deviation, as Troupe does)."""
import gzip
import os
import struct

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    if magic >> 8 != 0x08:
        raise SystemExit(f"{path}: not an unsigned-byte IDX file")
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def find(directory, base):
    for name in (base + ".gz", base):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    raise SystemExit(f"{base} not found in {directory}; install dataset-fashion-mnist or pass --data")


def load(directory=DEFAULT_DIR):
    """Returns (train_images, train_labels, test_images, test_labels, mean, std) with images
    as bytes of shape (n, 28, 28) and labels as bytes."""
    out = []
    for prefix in ("train", "t10k"):
        dims, images = read_idx(find(directory, f"{prefix}-images-idx3-ubyte"))
        _, labels = read_idx(find(directory, f"{prefix}-labels-idx1-ubyte"))
        out += [(dims, images), labels]
    return out
