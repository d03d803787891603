"""troupe.models: a model file that `troupe train-local --save-model` wrote comes back in
NumPy with its spec, input, classes and source, its parameters bit for bit those of the
.npz the same run writes, one view per block; a damaged file, an .npz and a missing file
raise troupe.Error naming the file."""
import os
import subprocess

import numpy as np
import pytest

import troupe

TROUPE = os.environ["TROUPE_BIN"]


def save(tmp_path, name):
    subprocess.run([TROUPE, "train-local", "--epochs", "1", "--train-samples", "500", "--save-model", name],
                   cwd=tmp_path, check=True, capture_output=True, timeout=300)
    return tmp_path / name


def test_a_saved_model_loads_with_its_blocks(tmp_path):
    m = troupe.models.load(save(tmp_path, "m.troupe"))
    assert m.spec == "mlp" and m.input_shape == (1, 28, 28) and m.classes == 10
    assert m.source["command"] == "troupe train-local" and m.source["epochs"] == 1
    assert m.params.dtype == np.float32 and m.params.ndim == 1
    archive = np.load(save(tmp_path, "m.npz"))  # the same seed: the same parameters
    assert sorted(m.arrays) == sorted(archive.files)
    for name, values in m.arrays.items():
        assert np.array_equal(values, archive[name]), name
    assert sum(a.size for a in m.arrays.values()) == m.params.size
    assert "SavedModel('mlp'" in repr(m)


def test_a_bad_file_raises_troupe_error_naming_it(tmp_path):
    path = save(tmp_path, "m.troupe")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    (tmp_path / "bad.troupe").write_bytes(bytes(data))
    for name, said in (("bad.troupe", "fails its CRC-32C check"), ("none.troupe", "cannot open")):
        with pytest.raises(troupe.Error) as e:
            troupe.models.load(tmp_path / name)
        assert e.value.code == "malformed" and said in str(e.value) and name in str(e.value)
    save(tmp_path, "m.npz")
    with pytest.raises(troupe.Error, match="a .npz archive is for other frameworks"):
        troupe.models.load(tmp_path / "m.npz")
