#!/usr/bin/env python3
"""PyTorch peer for tools/bench/resnet: Troupe's `resnet:width=W` (Note [The resnet model]:
two stages of W and 2W channels, each a 3x3 convolution, BatchNorm and ReLU, then a basic
block, ReLU and 2x2 max pooling; then the logits) trained on Fashion-MNIST with Troupe's
recipe: images normalised by the training set's pixel mean and deviation, batch 128,
SGD with Nesterov momentum 0.9 and weight decay 5e-4, lr 0.05 warmed up linearly from a
tenth over half an epoch and then cosine to zero, optional crops (shifts of up to N
pixels, the background shifted in) and mirror flips. Evaluation uses PyTorch's running
BatchNorm statistics (Troupe estimates them from the training set when it evaluates).
Prints each epoch's test accuracy and ends with one JSON line."""
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
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fashion_data  # noqa: E402


def conv_bn_relu(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]


class Block(nn.Module):
    """A basic block without a projection (it keeps its shape), then the ReLU after the sum."""

    def __init__(self, c):
        super().__init__()
        self.f = nn.Sequential(*conv_bn_relu(c, c), nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))

    def forward(self, x):
        return F.relu(x + self.f(x))


def resnet(width, classes=10):
    w, w2 = width, 2 * width
    return nn.Sequential(*conv_bn_relu(1, w), Block(w), nn.MaxPool2d(2), *conv_bn_relu(w, w2), Block(w2),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(w2 * 7 * 7, classes))


def images(data_dir, base):
    dims, raw = fashion_data.read_idx(fashion_data.find(data_dir, base))
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(*dims)


def augment(x, crop, flip, background, g):
    """Shifts each image by up to `crop` pixels each way (the background shifted in) and
    mirrors half of them, drawn from g."""
    if crop > 0:
        n = x.shape[0]
        padded = F.pad(x, (crop, crop, crop, crop), value=background)
        dx = torch.randint(0, 2 * crop + 1, (n,), generator=g)
        dy = torch.randint(0, 2 * crop + 1, (n,), generator=g)
        x = torch.stack([padded[i, :, dy[i]:dy[i] + 28, dx[i]:dx[i] + 28] for i in range(n)])
    if flip:
        mirror = torch.rand(x.shape[0], generator=g) < 0.5
        x = torch.where(mirror[:, None, None, None], x.flip(3), x)
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--warmup-epochs", type=float, default=0.5)
    ap.add_argument("--augment", default="none", help="none, or any of crop[=N] and flip, separated by commas")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-samples", type=int, default=0, help="use only the first N training samples")
    ap.add_argument("--data", default=fashion_data.DEFAULT_DIR)
    args = ap.parse_args()
    crop, flip = 0, False
    for part in filter(None, args.augment.split(",")):
        if part == "none":
            continue
        if part == "flip":
            flip = True
        elif part == "crop" or part.startswith("crop="):
            crop = int(part[5:]) if "=" in part else 2
        else:
            raise SystemExit(f"--augment: '{part}' is not crop, crop=N or flip")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train, y_train = images(args.data, "train-images-idx3-ubyte"), images(args.data, "train-labels-idx1-ubyte")
    x_test, y_test = images(args.data, "t10k-images-idx3-ubyte"), images(args.data, "t10k-labels-idx1-ubyte")
    if args.train_samples:
        x_train, y_train = x_train[:args.train_samples], y_train[:args.train_samples]
    pixels = x_train.double() / 255.0
    mean, std = pixels.mean().item(), pixels.std(unbiased=False).item()

    def norm(x):
        return ((x.double() / 255.0 - mean) / std).float().unsqueeze(1)

    xs, ys, xt, yt = norm(x_train), y_train.long(), norm(x_test), y_test.long()
    model = resnet(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    steps = len(xs) // args.batch_size
    total, warmup = steps * args.epochs, int(args.warmup_epochs * steps)

    def factor(step):  # Troupe's lr_schedule::at
        if warmup > 0 and step < warmup:
            return 0.1 + 0.9 * (step + 1) / warmup
        progress = min(1.0, max(0.0, (step - warmup) / max(1, total - warmup)))
        return 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    g = torch.Generator().manual_seed(args.seed)
    accuracies, seconds = [], 0.0
    for epoch in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        order = torch.randperm(len(xs), generator=g)
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            x = augment(xs[idx], crop, flip, -mean / std, g)
            opt.zero_grad()
            F.cross_entropy(model(x), ys[idx]).backward()
            opt.step()
            sched.step()
        seconds += time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            correct = sum((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item() for i in range(0, len(xt), 1000))
        accuracies.append(correct / len(xt))
        print(f"pytorch {torch.__version__}: epoch {epoch + 1}/{args.epochs}: test accuracy {100 * accuracies[-1]:.2f}%",
              file=sys.stderr, flush=True)
    samples = steps * args.batch_size * args.epochs
    print(json.dumps({"peer": "pytorch", "version": torch.__version__, "width": args.width, "epochs": args.epochs,
                      "augment": args.augment, "threads": args.threads, "epoch_accuracies": accuracies,
                      "test_accuracy": accuracies[-1], "train_seconds": seconds,
                      "samples_per_second": samples / seconds}), flush=True)


if __name__ == "__main__":
    main()
