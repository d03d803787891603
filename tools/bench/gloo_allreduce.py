#!/usr/bin/env python3
"""The PyTorch peer of tools/bench/collectives: WORLD processes of this machine in a gloo
group over loopback (ddp_world.py) time REPS calls of torch.distributed.all_reduce (sum)
of each size in FLOATS, after one warm-up call each, check every result, and print one
JSON line from rank 0: the torch version, the median milliseconds per call by size, and
whether every result was right."""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

from ddp_world import run_world


def train(rank, args, queue):
    want_sum = float(args.world * (args.world + 1) // 2)
    out = {"torch": torch.__version__, "workers": args.world, "ms": {}, "correct": True}
    for floats in args.floats:
        x = torch.full((floats,), float(rank + 1))
        y = x.clone()
        dist.all_reduce(y)  # warm-up
        times = []
        for _ in range(args.reps):
            y.copy_(x)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(y)
            times.append(time.perf_counter() - t0)
            out["correct"] = out["correct"] and bool((y == want_sum).all())
        out["ms"][str(floats)] = statistics.median(times) * 1e3
    if rank == 0:
        queue.put(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--floats", type=int, nargs="+", default=[1024, 1 << 20, 25 << 20])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    print(json.dumps(run_world(train, args, timeout=600)), flush=True)


if __name__ == "__main__":
    main()
