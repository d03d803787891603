"""troupe.models: the model files that ``--save-model`` writes, in NumPy.

``troupe.models.load(path)`` reads Troupe's format (every section and the description are
checked under CRC-32C; a damaged file, or one of another kind, raises ``troupe.Error``
with code "malformed") and returns a ``SavedModel``: ``spec`` (the model as asked for),
``input_shape``, ``classes``, ``source`` (what made it: command, job, mode, epochs, seed,
accuracy), ``params`` (all parameters, flat float32) and ``arrays`` (one view of
``params`` per parameter block, under the model's names and shapes: "fc1.weight", ...).
For other frameworks, ``--save-model FILE.npz`` writes the same arrays for ``numpy.load``.
"""
import json

from . import _troupe

__all__ = ["SavedModel", "load"]


class SavedModel:
    def __init__(self, d):
        self.spec = d["model"]
        self.input_shape = tuple(d["input_shape"])
        self.classes = d["classes"]
        self.source = json.loads(d["source"])
        self.params = d["params"]
        self.arrays = {
            name: self.params[offset:offset + _count(shape)].reshape(shape) for name, shape, offset in d["blocks"]
        }

    def __repr__(self):
        return (f"SavedModel({self.spec!r}, {self.params.size} parameters in {len(self.arrays)} blocks, "
                f"input {self.input_shape}, {self.classes} classes)")


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def load(path):
    """The model file at ``path`` (str or os.PathLike), checked."""
    return SavedModel(_troupe.load_model_file(str(path)))
