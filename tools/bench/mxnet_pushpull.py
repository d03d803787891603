#!/usr/bin/env python3
"""MXNet peer for tools/bench/ps_throughput: one KVStore server and one worker on this
machine (dist_async, the optimizer on the server: plain SGD), pushing and pulling one
array of FLOATS float32 values REPS times. Prints one JSON line with the median push and
pull times; each is waited for (nd.waitall) so the time covers the whole transfer."""
import argparse
import json
import os
import sys
import time


def worker(args):
    import mxnet as mx
    from mxnet import nd
    kv = mx.kv.create("dist_async")
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.01))
    kv.init(0, nd.zeros((args.floats,)))
    grad = nd.ones((args.floats,)) * 1e-6
    out = nd.zeros((args.floats,))
    kv._barrier()
    push, pull = [], []
    for r in range(args.reps + 1):
        t0 = time.perf_counter()
        kv.push(0, grad)
        nd.waitall()
        kv.pull(0, out=out)
        out.wait_to_read()
        t2 = time.perf_counter()
        # A push returns once the engine queued it; the pull after it waits for the server
        # to apply it. Time them apart with a second pull that has nothing new to wait for.
        kv.pull(0, out=out)
        out.wait_to_read()
        t3 = time.perf_counter()
        if r:
            pull.append(t3 - t2)
            push.append((t2 - t0) - (t3 - t2))
    push.sort()
    pull.sort()
    print(json.dumps({"peer": "mxnet", "version": mx.__version__, "floats": args.floats, "reps": args.reps,
                      "push_ms": 1000 * push[len(push) // 2], "pull_ms": 1000 * pull[len(pull) // 2]}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--floats", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    role = os.environ.get("DMLC_ROLE")
    if role is None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import mxnet_launch
        print(mxnet_launch.launch(__file__, sys.argv[1:], workers=1, timeout=600))
    elif role == "worker":
        worker(args)
    else:
        import mxnet  # noqa: F401  (a scheduler or server runs inside the import and exits)


if __name__ == "__main__":
    main()
