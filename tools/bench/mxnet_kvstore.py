#!/usr/bin/env python3
"""MXNet KVStore peer for tools/bench/modes: the seed system Troupe succeeds.

Without DMLC_ROLE in the environment this script is the launcher: it starts a scheduler,
one server and WORLD workers on this machine with the DMLC_* variables (as MXNet's
tools/launch.py does for a local job) and prints the workers' result as one JSON line.
With DMLC_ROLE=worker it trains the MLP (784-256-128-10) on Fashion-MNIST through
kvstore dist_sync or dist_async with the optimizer on the server (update_on_kvstore):
per-worker batch 128, SGD with momentum 0.9 and weight decay 5e-4, lr 0.05 per worker
batch (dist_sync sums the workers' gradients, as Troupe's sync mode does). MXNet's
engine and OpenMP get one thread per process.
"""
import argparse
import json
import os
import sys
import time


def worker(args):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fashion_data
    import mxnet as mx
    from mxnet import autograd, gluon, nd

    kv = mx.kv.create(args.kvstore)
    rank, world = kv.rank, kv.num_workers
    (tr_dims, tr_img), tr_lab, (te_dims, te_img), te_lab = fashion_data.load(args.data)
    import numpy as np
    xtr = np.frombuffer(tr_img, dtype=np.uint8).reshape(tr_dims[0], 784).astype(np.float32) / 255
    xte = np.frombuffer(te_img, dtype=np.uint8).reshape(te_dims[0], 784).astype(np.float32) / 255
    mean, std = xtr.mean(), xtr.std()
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    ytr = np.frombuffer(tr_lab, dtype=np.uint8).astype(np.float32)
    yte = np.frombuffer(te_lab, dtype=np.uint8).astype(np.float32)

    mx.random.seed(args.seed)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(256, activation="relu"), gluon.nn.Dense(128, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=mx.cpu())
    steps = (xtr.shape[0] // world + args.batch_size - 1) // args.batch_size
    sched = mx.lr_scheduler.CosineScheduler(max_update=steps * args.epochs, base_lr=args.lr,
                                            warmup_steps=steps // 2, warmup_begin_lr=args.lr / 10)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": args.lr, "momentum": 0.9, "wd": 5e-4, "lr_scheduler": sched},
                            kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.RandomState(args.seed)
    per_rank = xtr.shape[0] // world
    kv._barrier()
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        mine = rng.permutation(xtr.shape[0])[rank::world][:per_rank]
        for s in range(steps):
            idx = mine[s * args.batch_size:(s + 1) * args.batch_size]
            x, y = nd.array(xtr[idx]), nd.array(ytr[idx])
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch_size)
    nd.waitall()
    kv._barrier()
    secs = time.perf_counter() - t0
    if rank == 0:
        acc = float((net(nd.array(xte)).argmax(axis=1).asnumpy() == yte).mean())
        print(json.dumps({"peer": "mxnet", "version": mx.__version__, "kvstore": args.kvstore, "world": world,
                          "epochs": args.epochs, "samples_per_second": per_rank * world * args.epochs / secs,
                          "train_seconds": secs, "test_accuracy": acc}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kvstore", default="dist_sync", choices=["dist_sync", "dist_async"])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    role = os.environ.get("DMLC_ROLE")
    if role is None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import mxnet_launch
        print(mxnet_launch.launch(__file__, sys.argv[1:], args.world, timeout=args.timeout))
    elif role == "worker":
        worker(args)
    else:
        import mxnet  # noqa: F401  (a scheduler or server runs inside the import and exits)


if __name__ == "__main__":
    main()
