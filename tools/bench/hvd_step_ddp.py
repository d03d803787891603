#!/usr/bin/env python3
"""The peer of tools/bench/hvd_groups: PyTorch DDP (gloo, WORLD processes of one thread)
training examples/pytorch's CNN on random batches of the same size, which averages the
gradients in buckets during backward. Prints one JSON line: the median milliseconds a
step over ROUNDS rounds of STEPS steps (after a warm-up), as hvd_step_worker.py does."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

import ddp_world

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from fashion_net import Net  # noqa: E402


def run(rank, args, queue):
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(args.batch_size, 1, 28, 28, generator=g), torch.randint(0, 10, (args.batch_size,), generator=g)
    rounds = []
    for _ in range(args.rounds):
        times = []
        for _ in range(args.steps + 5):
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        rounds.append(1000 * statistics.median(times[5:]))
    if rank == 0:
        queue.put({"world": args.world, "ms": round(statistics.median(rounds), 3), "torch": torch.__version__})


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    print(json.dumps(ddp_world.run_world(run, args, timeout=600)))


if __name__ == "__main__":
    main()
