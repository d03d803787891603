"""Python objects through troupe's collectives, for troupe.horovod's broadcast_object and
allgather_object: an object is pickled, its bytes padded to whole 4-byte words and sent
as float32 words (a broadcast or an allgather copies bits, never computes on them), its
length first, so the receivers know how many words to take."""
import pickle

import numpy as np

_WORD = 4


def _words(data):
    """`data` (bytes) as float32 words, zero-padded."""
    padded = data + b"\0" * (-len(data) % _WORD)
    return np.frombuffer(padded, dtype=np.float32).copy()


def _length_words(n):
    return np.array([n], dtype=np.int64).view(np.float32)  # 2 words, bit for bit


def broadcast_object(obj, root_rank, is_root, broadcast_):
    """Rank root_rank's `obj` on every rank; broadcast_(array, root_rank, name) broadcasts
    a float32 array in place."""
    data = pickle.dumps(obj) if is_root else b""
    length = broadcast_(_length_words(len(data)), root_rank, "object.length").view(np.int64)[0]
    words = _words(data) if is_root else np.zeros(-(-int(length) // _WORD), dtype=np.float32)
    got = broadcast_(words, root_rank, "object.bytes")
    return obj if is_root else pickle.loads(got.tobytes()[:int(length)])


def allgather_object(obj, allgather):
    """Every rank's `obj`, in rank order; allgather(array, name) concatenates the ranks'
    float32 arrays along the first dimension."""
    data = pickle.dumps(obj)
    lengths = allgather(_length_words(len(data)).reshape(1, 2), "objects.lengths").reshape(-1).view(np.int64)
    words = allgather(_words(data), "objects.bytes").tobytes()
    out, at = [], 0
    for n in (int(x) for x in lengths):
        out.append(pickle.loads(words[at:at + n]))
        at += n + (-n % _WORD)
    return out
