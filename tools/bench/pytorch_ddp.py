#!/usr/bin/env python3
"""PyTorch DDP peer for tools/bench/modes.

Trains the MLP (784-256-128-10), or with --model cnn Troupe's cnn:fashion, on
Fashion-MNIST with DistributedDataParallel over gloo:
WORLD processes on this machine, one intra-op thread each, per-process batch 128, SGD
with Nesterov momentum 0.9 and weight decay 5e-4, the same half-epoch warm-up and cosine
schedule as Troupe. DDP averages gradients, so the learning rate is lr * WORLD (the linear
scaling rule; Troupe's sync mode sums instead, which is the same update). Prints one JSON
line: samples/s over the training time (evaluation excluded) and the test accuracy.
"""
import argparse
import json
import math
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import ddp_world  # noqa: E402
import fashion_data  # noqa: E402
import pytorch_compute  # noqa: E402


def tensors(data_dir):
    (tr_dims, tr_img), tr_lab, (te_dims, te_img), te_lab = fashion_data.load(data_dir)
    xtr = torch.frombuffer(bytearray(tr_img), dtype=torch.uint8).reshape(tr_dims[0], 784).float() / 255
    xte = torch.frombuffer(bytearray(te_img), dtype=torch.uint8).reshape(te_dims[0], 784).float() / 255
    mean, std = xtr.mean(), xtr.std()
    ytr = torch.frombuffer(bytearray(tr_lab), dtype=torch.uint8).long()
    yte = torch.frombuffer(bytearray(te_lab), dtype=torch.uint8).long()
    return (xtr - mean) / std, ytr, (xte - mean) / std, yte


def schedule(step, base, warmup, total):
    if step < warmup:
        return base * (0.1 + 0.9 * (step + 1) / warmup)
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * 0.5 * (1 + math.cos(math.pi * p))


def run(rank, args, queue):
    torch.manual_seed(args.seed)
    xtr, ytr, xte, yte = tensors(args.data)
    model = pytorch_compute.build(args.model)
    if args.model == "cnn":
        xtr, xte = xtr.reshape(-1, 1, 28, 28), xte.reshape(-1, 1, 28, 28)
    ddp = DDP(model)
    base = args.lr * args.world
    opt = torch.optim.SGD(ddp.parameters(), lr=base, momentum=0.9, nesterov=True, weight_decay=5e-4)
    per_rank = xtr.shape[0] // args.world
    steps = (per_rank + args.batch_size - 1) // args.batch_size
    total, warmup = steps * args.epochs, round(0.5 * steps)
    dist.barrier()
    t0 = time.perf_counter()
    step = 0
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        mine = torch.randperm(xtr.shape[0], generator=g)[rank::args.world][:per_rank]
        for s in range(steps):
            idx = mine[s * args.batch_size:(s + 1) * args.batch_size]
            for group in opt.param_groups:
                group["lr"] = schedule(step, base, warmup, total)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(xtr[idx]), ytr[idx]).backward()
            opt.step()
            step += 1
    dist.barrier()
    secs = time.perf_counter() - t0
    if rank == 0:
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        queue.put({"peer": "pytorch-ddp", "version": torch.__version__, "model": args.model, "world": args.world,
                   "epochs": args.epochs,
                   "samples_per_second": per_rank * args.world * args.epochs / secs, "train_seconds": secs,
                   "test_accuracy": acc})


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=fashion_data.DEFAULT_DIR)
    args = ap.parse_args()
    result = ddp_world.run_world(run, args, timeout=3600)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
