"""The CNN of examples/pytorch/fashion_cnn.py, in a module of its own so that other
training loops (tools/bench's PyTorch DDP peer) run the very same network. Needs only
PyTorch."""
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
