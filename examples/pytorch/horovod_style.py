"""A Horovod training script on Troupe: the CNN of fashion_cnn.py trained by each worker's
own optimizer on gradients averaged over the workers with allreduce, as hvd.* does it.

    troupe launch --local --workers 2 --servers 2 -- python3 examples/pytorch/horovod_style.py
    python3 examples/pytorch/horovod_style.py --kv local          # one worker, shards inside

What a Horovod script calls, and what it calls here:
    hvd.init(); hvd.rank(); hvd.size()        kv = troupe.kv.create('dist'); kv.rank; kv.num_workers
    hvd.broadcast_parameters(sd, root_rank=0) kv.broadcast_parameters(sd, root_rank=0)
    hvd.DistributedOptimizer(opt)             troupe.torch.allreduce_gradients(model, kv) before opt.step()
    hvd.allreduce(metric)                     kv.allreduce(metric)

Each worker trains on its own shard of the training set (TROUPE_WORKER_INDEX of
TROUPE_WORKERS). At the end the workers average BatchNorm's running statistics (buffers,
which no gradient carries), each prints its test accuracy, the workers' mean accuracy
(an allreduce of a metric) and a checksum of its parameters, equal on every worker.
"""
import argparse
import os

import torch
import torch.nn.functional as F

import troupe
import troupe.torch as tt
from fashion_cnn import load_fashion
from fashion_net import Net


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kv", default=None, help="store type (default: dist in a launched job, else local)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-samples", type=int, default=0, help="use only the first N training samples")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    kv = troupe.kv.create(args.kv or ("dist" if "TROUPE_COORDINATOR" in os.environ else "local"))

    (xs, ys), (xt, yt) = load_fashion(args.data, args.train_samples, slice(kv.rank, None, kv.num_workers))

    torch.manual_seed(args.seed + kv.rank)  # different on purpose: the broadcast makes them one
    model = Net()
    kv.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(args.seed + kv.rank)
    steps = len(xs) // args.batch_size
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(xs), generator=g)
        loss_sum = 0.0
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            tt.allreduce_gradients(model, kv)  # every .grad is now the workers' average
            opt.step()
            loss_sum += loss.item()
        mean_loss = kv.allreduce(torch.tensor([loss_sum / max(steps, 1)]))
        print(f"worker {kv.rank} epoch {epoch + 1}: mean loss over the workers {mean_loss.item():.4f}", flush=True)
    for name, buf in model.named_buffers():
        if buf.dtype == torch.float32:
            kv.allreduce(buf, out=buf, name="buffer:" + name)
    model.eval()
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean()
    mean_acc = kv.allreduce(acc.reshape(1))
    checksum = sum(float(p.double().sum()) for p in model.parameters())
    print(f"worker {kv.rank}: test accuracy {100 * acc.item():.2f}%, mean over the workers "
          f"{100 * mean_acc.item():.2f}%, parameter checksum {checksum:.6f}", flush=True)
    kv.close()


if __name__ == "__main__":
    main()
