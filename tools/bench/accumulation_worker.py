#!/usr/bin/env python3
"""Troupe's side of tools/bench/accumulation: run as each worker of a `--mode allreduce`
key-value job that `troupe launch -- ...` started, it trains examples/pytorch's CNN
(fashion_net.Net, BatchNorm) on its shard of Fashion-MNIST with troupe.horovod's
DistributedOptimizer, as a Horovod script does, in one of two ways over the same
samples in the same order: whole batches of BATCH (backward_passes_per_step=1, lr LR),
or each batch as PASSES passes of BATCH / PASSES with backward_passes_per_step=PASSES
and lr LR / PASSES (autograd sums the passes, as the issue's recipe says). At the end
the workers average BatchNorm's running statistics and rank 0 prints one JSON line:
the way, the test accuracy and the samples per second."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

import troupe.horovod as hvd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from fashion_cnn import load_fashion  # noqa: E402
from fashion_net import Net  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--passes", type=int, required=True, help="backward passes per step (1: whole batches)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="samples per step and worker")
    ap.add_argument("--lr", type=float, default=0.05, help="for whole batches; divided by --passes")
    ap.add_argument("--train-samples", type=int, default=0)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.batch_size % args.passes:
        sys.exit(f"--batch-size {args.batch_size} does not split into {args.passes} passes")
    torch.set_num_threads(1)
    hvd.init(timeout=300)
    (xs, ys), (xt, yt) = load_fashion(args.data, args.train_samples, slice(hvd.rank(), None, hvd.size()))
    torch.manual_seed(args.seed)
    model = Net()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    base = torch.optim.SGD(model.parameters(), lr=args.lr / args.passes, momentum=0.9, weight_decay=5e-4)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                   backward_passes_per_step=args.passes)
    g = torch.Generator().manual_seed(args.seed * 1000 + hvd.rank())
    steps, part = len(xs) // args.batch_size, args.batch_size // args.passes
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        model.train()
        order = torch.randperm(len(xs), generator=g)
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad()
            for p in range(args.passes):
                rows = idx[p * part:(p + 1) * part]
                F.cross_entropy(model(xs[rows]), ys[rows]).backward()
            opt.step()
    seconds = time.perf_counter() - t0
    for name, buf in model.named_buffers():
        if buf.dtype == torch.float32:
            hvd.allreduce_(buf, name="buffer:" + name)
    model.eval()
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    samples = steps * args.batch_size * args.epochs * hvd.size()
    if hvd.rank() == 0:
        way = "whole" if args.passes == 1 else f"passes_{args.passes}"
        os.write(1, (json.dumps({"way": way, "seed": args.seed, "accuracy": round(acc, 5),
                                 "samples_per_s": round(samples / seconds, 1)}) + "\n").encode())
    hvd.shutdown()


if __name__ == "__main__":
    main()
