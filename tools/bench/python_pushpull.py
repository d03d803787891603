#!/usr/bin/env python3
"""Troupe's Python client for tools/bench/ps_throughput: run as the one worker of a job
that `troupe launch -- ...` started (one shard server, async, mutual TLS), it pushes and
pulls one key of FLOATS float32 values REPS times through `troupe.kv`, each call waited
for, as the C++ client (bench_ps) and MXNet's Python KVStore do in the same bench. Prints
one JSON line with the median push and pull times, the pulled value it checked, how many
calls took the same-host fast path and how many the network, and the bytes sent over it."""
import argparse
import json
import statistics
import time

import numpy as np

import troupe


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--floats", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rtol", type=float, default=1e-3,
                    help="relative tolerance of the value check (a job with --pull-precision bf16 needs 1e-2)")
    args = ap.parse_args()
    kv = troupe.kv.create("dist")
    w = np.zeros(args.floats, np.float32)
    grad = np.full(args.floats, 1e-6, np.float32)
    kv.init(0, w)
    kv.set_optimizer(kind="sgd", lr=0.01)
    push, pull = [], []
    for r in range(args.reps + 1):  # the first round warms the buffers up and is not counted
        t0 = time.perf_counter()
        kv.wait(kv.push(0, grad))
        t1 = time.perf_counter()
        kv.wait(kv.pull(0, out=w))
        t2 = time.perf_counter()
        if r:
            push.append(t1 - t0)
            pull.append(t2 - t1)
    # Every push applied once: w = -(reps + 1) * lr * grad everywhere.
    expected = -(args.reps + 1) * 0.01 * 1e-6
    ok = bool(np.allclose(w, expected, rtol=args.rtol))
    moved = kv.transfer_stats()
    kv.close()
    print(json.dumps({"peer": "troupe-python", "floats": args.floats, "reps": args.reps, "values_ok": ok,
                      "push_ms": 1000 * statistics.median(push), "pull_ms": 1000 * statistics.median(pull),
                      "shared_memory_calls": moved["shared_memory_calls"], "network_calls": moved["network_calls"],
                      "network_bytes": moved["network_bytes"]}),
          flush=True)


if __name__ == "__main__":
    main()
