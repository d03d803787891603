"""Troupe: train your own models on Troupe's shard servers.

- troupe.kv: MXNet-KVStore-style init/push/pull/wait on Troupe's shards
  (``troupe.kv.create('local' | 'dist_sync' | 'dist_async' | 'dist_ssp')``).
- troupe.torch: a Horovod-style DistributedOptimizer for PyTorch (imported on demand,
  so troupe.kv works without PyTorch).
- troupe.horovod: Horovod's PyTorch calls (init, allreduce, broadcast_parameters,
  DistributedOptimizer, ...) on Troupe's collectives, imported on demand.
- troupe.models: the model files that ``--save-model`` writes, read into NumPy.
"""
from .errors import Error
from . import kv
from . import models

__all__ = ["Error", "kv", "models"]
