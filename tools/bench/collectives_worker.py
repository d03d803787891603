#!/usr/bin/env python3
"""Troupe's side of tools/bench/collectives: run as each worker of a key-value job that
`troupe launch -- ...` started, it times REPS calls of kv.allreduce (Sum) of each size in
FLOATS (after one warm-up call each), checks every result against the exact sum of the
workers' values, and rank 0 prints one JSON line: the median milliseconds per call by
size, and whether every result was right."""
import argparse
import json
import statistics
import time

import numpy as np

import troupe


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--floats", type=int, nargs="+", default=[1024, 1 << 20, 25 << 20])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    kv = troupe.kv.create("dist", timeout=120)
    n = kv.num_workers
    want_sum = float(n * (n + 1) // 2)  # worker r gives r + 1 everywhere
    out = {"workers": n, "ms": {}, "correct": True}
    for floats in args.floats:
        x = np.full(floats, kv.rank + 1, np.float32)
        y = np.empty_like(x)
        kv.allreduce(x, op=troupe.kv.Sum, out=y)  # warm-up: connections, allocations
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            kv.allreduce(x, op=troupe.kv.Sum, out=y)
            times.append(time.perf_counter() - t0)
            out["correct"] = out["correct"] and bool((y == want_sum).all())
        out["ms"][str(floats)] = statistics.median(times) * 1e3
    if kv.rank == 0:
        print(json.dumps(out), flush=True)
    kv.close()


if __name__ == "__main__":
    main()
