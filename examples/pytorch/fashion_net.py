"""The CNN of examples/pytorch/fashion_cnn.py and its learning-rate schedule, in a module
of their own so that other training loops (tools/bench's PyTorch DDP peer) run the very
same network and schedule. Needs only PyTorch."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    """Two 3x3 conv layers with BatchNorm and max-pooling, Dropout, two linear layers:
    28x28 grey images to 10 logits."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.conv2, self.bn2 = nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64)
        self.drop = nn.Dropout(0.3)
        self.fc1, self.fc2 = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


def schedule(optimizer, steps_per_epoch, epochs, warmup_steps, cosine=True):
    """A LambdaLR to step after every optimizer step: a linear warm-up from a tenth of the
    lr over `warmup_steps` (a fresh network with momentum and no warm-up can kill its
    ReLUs in the first steps, more so with stale gradients), times a cosine that falls to
    zero over the epochs and changes once per epoch. Through troupe.torch each change is
    one round trip to the shards, so after the warm-up it costs one per epoch."""
    def factor(step):
        warm = min(1.0, 0.1 + 0.9 * step / warmup_steps) if warmup_steps > 0 else 1.0
        epoch = min(step // max(steps_per_epoch, 1), epochs)
        return warm * (0.5 * (1 + math.cos(math.pi * epoch / epochs)) if cosine else 1.0)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
