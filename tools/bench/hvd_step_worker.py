#!/usr/bin/env python3
"""Troupe's side of tools/bench/hvd_groups: run as each worker of a key-value job that
`troupe launch -- ...` started, it times training steps of examples/pytorch's CNN
(fashion_net.Net, 422k parameters) on random batches, with the gradients averaged three
ways: troupe.torch.allreduce_gradients after backward (every gradient in one call),
hvd.DistributedOptimizer in one group (its default for a model under 64 MiB), and
hvd.DistributedOptimizer in GROUPS groups (the calls start during backward). The ways
take turns for ROUNDS rounds, since this VM's speed drifts; rank 0 prints one JSON line:
each way's median milliseconds a step over its rounds (each round's figure the median of
STEPS steps after a warm-up), and whether the workers ended with equal parameters."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

import troupe.horovod as hvd
import troupe.torch as tt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from fashion_net import Net  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    hvd.init(timeout=120)
    torch.manual_seed(0)  # the same start on every worker
    g = torch.Generator().manual_seed(hvd.rank())
    x, y = torch.randn(args.batch_size, 1, 28, 28, generator=g), torch.randint(0, 10, (args.batch_size,), generator=g)
    ways = ["after_backward", "one_group", f"groups_{args.groups}"]
    ms = {w: [] for w in ways}
    equal = True
    for _ in range(args.rounds):
        for way in ways:
            model = Net()
            base = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            opt = base if way == "after_backward" else hvd.DistributedOptimizer(
                base, num_groups=args.groups if way.startswith("groups") else 0)
            times = []
            for _ in range(args.steps + 5):
                t0 = time.perf_counter()
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                if way == "after_backward":
                    tt.allreduce_gradients(model, hvd._kv_store())
                opt.step()
                times.append(time.perf_counter() - t0)
            ms[way].append(1000 * statistics.median(times[5:]))
            checksum = torch.tensor([float(sum(p.double().sum() for p in model.parameters()))])
            every = hvd.allgather(checksum)
            equal &= bool((every == every[0]).all())
    if hvd.rank() == 0:
        print(json.dumps({"workers": hvd.size(), "ms": {w: round(statistics.median(v), 3) for w, v in ms.items()},
                          "rounds_ms": {w: [round(t, 3) for t in v] for w, v in ms.items()}, "equal": equal}),
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
