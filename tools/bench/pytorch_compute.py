#!/usr/bin/env python3
"""PyTorch peer for tools/bench/compute_vs_pytorch.

Trains the same models as Troupe's bench_compute (mlp = 784-256-128-10, cnn = cnn:fashion,
gpt:layers=L,dim=C,heads=H = Troupe's Note [The gpt model]) with the same batch size and
optimizer (SGD, Nesterov momentum 0.9, weight decay 5e-4), on in-memory random batches
(token ids for gpt), with one intra-op thread. Prints one JSON line.
"""
import argparse
import json
import math
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Attention(nn.Module):
    """Causal multi-head self-attention as Troupe's attention layer computes it."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class Residual(nn.Module):
    def __init__(self, *layers):
        super().__init__()
        self.f = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.f(x)


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, dim, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(context, dim) * 0.02)
        blocks = []
        for _ in range(layers):
            blocks.append(Residual(nn.LayerNorm(dim), Attention(dim, heads)))
            blocks.append(Residual(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)))
        self.blocks = nn.Sequential(*blocks, nn.LayerNorm(dim), nn.Linear(dim, vocab))

    def forward(self, ids):
        return self.blocks(self.tok(ids) + self.pos)


def gpt_sizes(name):
    sizes = {"layers": 6, "dim": 384, "heads": 6}
    for item in filter(None, name[4:].split(",")):
        key, value = item.split("=")
        sizes[key] = int(value)
    return sizes


def build(name, vocab=113, context=256):
    if name == "gpt" or name.startswith("gpt:"):
        return Gpt(vocab, context, **gpt_sizes(name))
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
    ap.add_argument("--vocab", type=int, default=113, help="gpt: classes (the fortunes have 113 characters)")
    ap.add_argument("--context", type=int, default=256, help="gpt: characters a sample")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="bf16: forward under torch.autocast(bfloat16), PyTorch's mixed precision on the CPU")
    args = ap.parse_args()
    if args.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit(3)
    dev = torch.device(args.device)

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = build(args.model, args.vocab, args.context).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    nb = 16
    text = args.model.startswith("gpt")
    if text:
        xs = torch.randint(0, args.vocab, (nb * args.batch_size, args.context)).to(dev)
        ys = torch.randint(0, args.vocab, (nb * args.batch_size, args.context)).to(dev)
    else:
        xs = torch.randn(nb * args.batch_size, 1, 28, 28).to(dev)
        ys = torch.randint(0, 10, (nb * args.batch_size,)).to(dev)

    def run(n):
        loss = None
        for s in range(n):
            i = (s % nb) * args.batch_size
            x, y = xs[i:i + args.batch_size], ys[i:i + args.batch_size]
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
                out = model(x)
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
            loss.backward()
            opt.step()
        return loss.item()  # waits for the device's queued work

    run(args.warmup)
    t0 = time.perf_counter()
    loss = run(args.steps)
    secs = time.perf_counter() - t0
    print(json.dumps({"peer": "pytorch", "version": torch.__version__, "model": args.model, "device": args.device,
                      "batch_size": args.batch_size, "threads": torch.get_num_threads(), "steps": args.steps,
                      "autocast": args.autocast,
                      "samples_per_second": args.steps * args.batch_size / secs, "final_loss": loss}))


if __name__ == "__main__":
    main()
