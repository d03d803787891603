#!/usr/bin/env python3
"""PyTorch DDP peer for tools/bench/pytorch_through_troupe: the training loop of
examples/pytorch/fashion_cnn.py (its network, fashion_net.Net; the same data split,
normalisation, shuffling, batch, SGD with momentum 0.9 and weight decay 5e-4, and the
learning-rate schedule fashion_net.schedule) with the gradients averaged by
DistributedDataParallel over gloo instead of Troupe's shards: WORLD processes on this
machine, one intra-op thread each. Prints one JSON line: the samples trained, the
training seconds of the slowest rank (evaluation excluded), samples/s and rank 0's test
accuracy after the last epoch."""
import argparse
import json
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "pytorch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import ddp_world  # noqa: E402
import fashion_data  # noqa: E402
from fashion_net import Net, schedule  # noqa: E402


def images(data_dir, base):
    dims, raw = fashion_data.read_idx(fashion_data.find(data_dir, base))
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(*dims)


def run(rank, args, queue):
    x_train, y_train = images(args.data, "train-images-idx3-ubyte"), images(args.data, "train-labels-idx1-ubyte")
    x_test, y_test = images(args.data, "t10k-images-idx3-ubyte"), images(args.data, "t10k-labels-idx1-ubyte")
    if args.train_samples:
        x_train, y_train = x_train[:args.train_samples], y_train[:args.train_samples]
    pixels = x_train.double() / 255.0
    mean, std = pixels.mean().item(), pixels.std(unbiased=False).item()  # as NumPy's mean() and std()

    def norm(x):
        return ((x.double() / 255.0 - mean) / std).float().unsqueeze(1)

    xs, ys = norm(x_train[rank::args.world]), y_train[rank::args.world].long()
    xt, yt = norm(x_test), y_test.long()
    torch.manual_seed(args.seed)
    model = Net()
    ddp = DDP(model)  # broadcasts rank 0's parameters, as troupe.torch.broadcast_parameters does
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(args.seed + rank)
    steps = len(xs) // args.batch_size
    sched = schedule(opt, steps, args.epochs, int(args.warmup_epochs * steps), args.schedule == "cosine")
    dist.barrier()
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        ddp.train()
        order = torch.randperm(len(xs), generator=g)
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad()
            F.cross_entropy(ddp(xs[idx]), ys[idx]).backward()
            opt.step()
            sched.step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        model.eval()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        samples = steps * args.batch_size * args.epochs * args.world
        queue.put({"peer": "pytorch-ddp", "version": torch.__version__, "world": args.world, "epochs": args.epochs,
                   "samples": samples, "train_seconds": seconds, "samples_per_second": samples / seconds,
                   "test_accuracy": acc})


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    ap.add_argument("--warmup-epochs", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-samples", type=int, default=0, help="use only the first N training samples")
    ap.add_argument("--data", default=fashion_data.DEFAULT_DIR)
    args = ap.parse_args()
    result = ddp_world.run_world(run, args, timeout=7200)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
