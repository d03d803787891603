"""Runs a PyTorch DDP peer of tools/bench on WORLD processes of this machine: each process
joins a gloo group over loopback with one intra-op thread, calls train(rank, args, queue)
and leaves the group; run_world returns what rank 0 put on the queue."""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(train, rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    train(rank, args, queue)
    dist.destroy_process_group()


def run_world(train, args, timeout):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(train, r, args, port, queue)) for r in range(args.world)]
    for p in procs:
        p.start()
    result = queue.get(timeout=timeout)
    for p in procs:
        p.join(timeout=60)
    return result
