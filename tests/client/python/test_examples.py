"""The Python examples run and learn: examples/pytorch/kvstore_numpy.py as two launched
async workers over TLS, examples/pytorch/fashion_cnn.py (BatchNorm, Dropout,
troupe.torch) on a subset in one process, and examples/pytorch/horovod_style.py (Horovod's
calls: broadcast_parameters, allreduce of gradients and metrics) as two launched workers
whose models stay equal. Thresholds are far below what the full runs
reach; they catch an example that stopped learning, not a small regression."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.environ.get("TROUPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TROUPE = os.environ.get("TROUPE_BIN", "troupe")
EXAMPLES = os.path.join(ROOT, "examples", "pytorch")


def accuracies(text):
    return [float(a) for a in re.findall(r"test accuracy ([0-9.]+)%", text)]


def test_the_numpy_kvstore_loop_learns_as_two_launched_workers(tmp_path):
    p = subprocess.run([TROUPE, "launch", "--local", "--workers", "2", "--servers", "2", "--mode", "async",
                        "--metrics", "off", "--job-dir", str(tmp_path / "job"), "--", sys.executable,
                        os.path.join(EXAMPLES, "kvstore_numpy.py"), "--steps", "200"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    acc = accuracies(p.stderr)
    assert len(acc) == 2 and min(acc) > 75  # 81-82% in every run: the shards decay the lr to zero


def test_the_horovod_style_script_learns_with_the_same_model_on_both_workers(tmp_path):
    pytest.importorskip("torch")
    p = subprocess.run([TROUPE, "launch", "--local", "--workers", "2", "--servers", "2", "--metrics", "off",
                        "--job-dir", str(tmp_path / "job"), "--", sys.executable,
                        os.path.join(EXAMPLES, "horovod_style.py"), "--epochs", "1", "--train-samples", "2000"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    acc = accuracies(p.stderr)
    assert len(acc) == 2 and min(acc) > 55, p.stderr[-3000:]  # 68.7% in the first run
    sums = re.findall(r"parameter checksum (-?[0-9.]+)", p.stderr)
    assert len(sums) == 2 and sums[0] == sums[1]  # averaged gradients keep the replicas equal


def test_the_pytorch_cnn_learns_through_troupe():
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "fashion_cnn.py"), "--kv", "local", "--epochs", "1",
                        "--train-samples", "2000"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    acc = accuracies(p.stdout)
    assert len(acc) == 1 and acc[0] > 60
