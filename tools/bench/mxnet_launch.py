"""Starts an MXNet KVStore job on this machine the way MXNet's tools/launch.py does for a
local job: a scheduler, SERVERS servers and WORKERS workers, all running the same script
with the DMLC_* variables set. Used by the MXNet peers of tools/bench."""
import os
import socket
import subprocess
import sys


def launch(script, argv, workers, servers=1, timeout=1800):
    """Runs `script argv` in every role and returns the last JSON line a worker printed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                DMLC_NUM_SERVER=str(servers), DMLC_NUM_WORKER=str(workers), OMP_NUM_THREADS="1",
                MXNET_CPU_WORKER_NTHREADS="1", DMLC_INTERFACE="lo", PS_VERBOSE="0")
    me = [sys.executable, os.path.abspath(script)] + argv
    procs = [subprocess.Popen(me, env=dict(base, DMLC_ROLE="scheduler"))]
    procs += [subprocess.Popen(me, env=dict(base, DMLC_ROLE="server")) for _ in range(servers)]
    worker_procs = [subprocess.Popen(me, env=dict(base, DMLC_ROLE="worker"), stdout=subprocess.PIPE, text=True)
                    for _ in range(workers)]
    result = None
    try:
        for w in worker_procs:
            out, _ = w.communicate(timeout=timeout)
            for line in out.splitlines():
                if line.startswith("{"):
                    result = line
            if w.returncode != 0:
                raise SystemExit(f"an MXNet worker exited with {w.returncode}")
        for p in procs:
            p.wait(timeout=60)
    finally:
        for p in procs + worker_procs:
            if p.poll() is None:
                p.kill()
    if not result:
        raise SystemExit("the MXNet job printed no result")
    return result
