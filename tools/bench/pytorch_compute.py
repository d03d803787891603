#!/usr/bin/env python3
"""PyTorch peer for tools/bench/compute_vs_pytorch.

Trains the same models as Troupe's bench_compute (mlp = 784-256-128-10, cnn = cnn:fashion)
with the same batch size and optimizer (SGD, Nesterov momentum 0.9, weight decay 5e-4),
on in-memory random batches, with one intra-op thread. Prints one JSON line.
"""
import argparse
import json
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def build(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    raise SystemExit(f"unknown model {name!r}; use mlp or cnn")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (exits 3 when CUDA is unavailable)")
    args = ap.parse_args()
    if args.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit(3)
    dev = torch.device(args.device)

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = build(args.model).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    nb = 16
    xs = torch.randn(nb * args.batch_size, 1, 28, 28).to(dev)
    ys = torch.randint(0, 10, (nb * args.batch_size,)).to(dev)

    def run(n):
        loss = None
        for s in range(n):
            i = (s % nb) * args.batch_size
            x, y = xs[i:i + args.batch_size], ys[i:i + args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return loss.item()  # waits for the device's queued work

    run(args.warmup)
    t0 = time.perf_counter()
    loss = run(args.steps)
    secs = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch", "version": torch.__version__, "model": args.model, "device": args.device,
                      "batch_size": args.batch_size, "threads": torch.get_num_threads(), "steps": args.steps,
                      "samples_per_second": args.steps * args.batch_size / secs, "final_loss": loss}))


if __name__ == "__main__":
    main()
