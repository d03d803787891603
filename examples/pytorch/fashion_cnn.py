"""A PyTorch CNN of your own (BatchNorm and Dropout, which Troupe's model spec lacks)
trained on Fashion-MNIST through Troupe's shard servers with troupe.torch.

    troupe launch --local --workers 2 --servers 2 --mode sync  -- python3 examples/pytorch/fashion_cnn.py
    troupe launch --local --workers 2 --servers 2 --mode async -- python3 examples/pytorch/fashion_cnn.py
    python3 examples/pytorch/fashion_cnn.py --kv local          # one process, shards inside it

Each worker trains on its own shard of the training set (TROUPE_WORKER_INDEX of
TROUPE_WORKERS) and prints its test accuracy after every epoch (--eval end: only after
the last), then one JSON line of its figures: samples trained, the seconds spent training
(evaluation excluded) and the test accuracy. The network is fashion_net.Net. Needs
PyTorch (Debian's python3-torch) and PYTHONPATH=build/python (or the installed module).
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import troupe
import troupe.torch as tt
from fashion_net import Net, schedule


def read_idx(directory, base):
    for name in (base + ".gz", base):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with (gzip.open if name.endswith(".gz") else open)(path, "rb") as f:
                data = f.read()
            ndim = struct.unpack(">I", data[:4])[0] & 0xFF
            dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
            return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)
    sys.exit(f"{base} not found in {directory}; install dataset-fashion-mnist or pass --data DIR")


def load_fashion(directory, train_samples, mine):
    """Fashion-MNIST as tensors: the training samples `mine` selects (of the first
    train_samples, 0: all) and the test set, images (N, 1, 28, 28) scaled by the training
    set's mean and deviation, labels int64."""
    x_train, y_train = read_idx(directory, "train-images-idx3-ubyte"), read_idx(directory, "train-labels-idx1-ubyte")
    x_test, y_test = read_idx(directory, "t10k-images-idx3-ubyte"), read_idx(directory, "t10k-labels-idx1-ubyte")
    if train_samples:
        x_train, y_train = x_train[:train_samples], y_train[:train_samples]
    mean, std = x_train.mean() / 255.0, x_train.std() / 255.0
    norm = lambda x: torch.from_numpy(((x / 255.0 - mean) / std).astype(np.float32)).unsqueeze(1)  # noqa: E731
    return ((norm(x_train[mine]), torch.from_numpy(y_train[mine].astype(np.int64))),
            (norm(x_test), torch.from_numpy(y_test.astype(np.int64))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kv", default=None, help="store type (default: dist in a launched job, else local)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    ap.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                    help="the learning rate over the epochs: cosine decay to zero by the last, or constant")
    ap.add_argument("--warmup-epochs", type=float, default=0.5,
                    help="linear warm-up of the learning rate from a tenth, over this many epochs")
    ap.add_argument("--train-samples", type=int, default=0, help="use only the first N training samples")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval", choices=["epoch", "end"], default="epoch", help="test after every epoch, or after the last")
    args = ap.parse_args()
    torch.set_num_threads(1)
    kind = args.kv or ("dist" if "TROUPE_COORDINATOR" in os.environ else "local")
    kv = troupe.kv.create(kind)

    index = int(os.environ.get("TROUPE_WORKER_INDEX", kv.rank))
    workers = int(os.environ.get("TROUPE_WORKERS", kv.num_workers))
    (xs, ys), (xt, yt) = load_fashion(args.data, args.train_samples, slice(index, None, workers))

    torch.manual_seed(args.seed)
    model = Net()
    tt.broadcast_parameters(model, kv)
    # BatchNorm's running statistics are buffers, not parameters: each worker keeps its own.
    # The same optimizer in every mode: in async and ssp the shards keep each worker's own
    # momentum (--async-rule dana), so 0.9 means what it means in sync.
    sgd = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=5e-4)
    opt = tt.DistributedOptimizer(sgd, model.named_parameters(), kv)
    g = torch.Generator().manual_seed(args.seed + index)
    steps = len(xs) // args.batch_size
    # A PyTorch scheduler on the wrapped optimizer: troupe.torch sends each new lr to the
    # shards before the next step's first push.
    sched = schedule(sgd, steps, args.epochs, int(args.warmup_epochs * steps), args.schedule == "cosine")
    train_seconds, acc = 0.0, None
    for epoch in range(args.epochs):
        model.train()
        t0, loss_sum = time.perf_counter(), 0.0
        order = torch.randperm(len(xs), generator=g)
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item()
        seconds = time.perf_counter() - t0
        train_seconds += seconds
        if args.eval == "end" and epoch + 1 < args.epochs:
            print(f"worker {kv.rank} epoch {epoch + 1}: loss {loss_sum / max(steps, 1):.4f}, "
                  f"{steps * args.batch_size / seconds:.0f} samples/s", flush=True)
            continue
        model.eval()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        print(f"worker {kv.rank} epoch {epoch + 1}: loss {loss_sum / max(steps, 1):.4f}, "
              f"{steps * args.batch_size / seconds:.0f} samples/s, test accuracy {100 * acc:.2f}%", flush=True)
    print(json.dumps({"worker": kv.rank, "samples": steps * args.batch_size * args.epochs,
                      "train_seconds": train_seconds, "test_accuracy": acc}), flush=True)
    kv.close()


if __name__ == "__main__":
    main()
