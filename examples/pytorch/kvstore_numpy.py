"""An MXNet-KVStore-style loop in plain NumPy: softmax regression on Fashion-MNIST whose
weights live on Troupe's shard servers. Ported from MXNet by changing the import:

    troupe launch --local --workers 2 --servers 2 --mode async -- python3 examples/pytorch/kvstore_numpy.py
    python3 examples/pytorch/kvstore_numpy.py --kv local
"""
import argparse
import os

import numpy as np

import troupe
from fashion_cnn import read_idx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv", default=None)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    kind = args.kv or ("dist" if "TROUPE_COORDINATOR" in os.environ else "local")
    kv = troupe.kv.create(kind)
    x = read_idx(args.data, "train-images-idx3-ubyte").reshape(-1, 784).astype(np.float32) / 255.0
    y = read_idx(args.data, "train-labels-idx1-ubyte").astype(np.int64)
    xt = read_idx(args.data, "t10k-images-idx3-ubyte").reshape(-1, 784).astype(np.float32) / 255.0
    yt = read_idx(args.data, "t10k-labels-idx1-ubyte").astype(np.int64)
    w, b = np.zeros((784, 10), np.float32), np.zeros(10, np.float32)
    kv.init(["w", "b"], [w, b])                      # MXNet: kv.init(keys, values)
    # The shards' optimizer decays the lr to zero over the run (MXNet's lr_scheduler on the
    # kvstore): each key is updated once per round in sync, once per push in async.
    updates = args.steps * (1 if kv.mode == "sync" else kv.num_workers)
    kv.set_optimizer(kind="sgd", lr=0.1, momentum=0.9, schedule="cosine", total_updates=updates)
    rng = np.random.default_rng(kv.rank)
    for step in range(args.steps):
        kv.pull(["w", "b"], out=[w, b])              # MXNet: kv.pull(keys, out=values)
        kv.wait_all()
        i = rng.integers(0, len(x), 128)
        logits = x[i] @ w + b
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(i)), y[i]] -= 1
        kv.push(["w", "b"], [(x[i].T @ p / len(i)).astype(np.float32), p.mean(0).astype(np.float32)])
    kv.wait_all()
    kv.barrier()                                     # every worker's last push is in
    kv.pull(["w", "b"], out=[w, b])
    kv.wait_all()
    print(f"worker {kv.rank}: test accuracy {100 * ((xt @ w + b).argmax(1) == yt).mean():.2f}%", flush=True)
    kv.close()


if __name__ == "__main__":
    main()
