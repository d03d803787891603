"""End to end: `troupe evaluate` on the model files that --save-model writes (train-local,
train, launch), and --init-from. A language model's run and its evaluation report
bits per character and a sample of its text. The saved parameters are the job's final ones (their
FNV-1a is the job's params_fnv1a, read with a reader of the documented format written
here from Note [Tensor files]); evaluate scores them as the job did; NumPy reads the .npz
block by block with the same bits; a run from a file starts from it. Bad input: a model
file of another model, an .npz, a damaged file, an unwritable --save-model (refused before
training), --simulate-compute and key-value jobs, and --augment on evaluate."""
import json
import os
import struct
import subprocess
import zlib  # noqa: F401  (numpy.load checks the archive's CRCs itself)

import numpy as np
import pytest

TROUPE = os.environ["TROUPE_BIN"]
SMALL = ["--epochs", "1", "--train-samples", "2000", "--metrics", "off"]


def run(*args, cwd, check=True):
    r = subprocess.run([TROUPE, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


def read_troupe_file(path):
    """Troupe's tensor file, as Note [Tensor files] lays it out."""
    data = open(path, "rb").read()
    assert data[:8] == b"TROUPEtf"
    footer_len, footer_crc, version = struct.unpack("<QII", data[-24:-8])
    assert data[-8:] == b"TROUPEnd" and version == 1
    footer = json.loads(data[-24 - footer_len:-24])
    sections = {}
    for s in footer["sections"]:
        raw = data[s["offset"]:s["offset"] + s["bytes"]]
        sections[s["name"]] = np.frombuffer(raw, dtype="<f4" if s["dtype"] == "f32" else None).reshape(s["shape"])
    return footer, sections


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def test_train_local_saves_both_formats_and_evaluate_scores_the_file(tmp_path):
    trained = last_json(run("train-local", "--epochs", "1", "--train-samples", "2000", "--save-model", "m.troupe",
                            cwd=tmp_path).stdout)
    run("train-local", "--epochs", "1", "--train-samples", "2000", "--save-model", "m.npz", cwd=tmp_path)
    footer, sections = read_troupe_file(tmp_path / "m.troupe")
    assert footer["kind"] == "troupe-model" and footer["meta"]["model"] == "mlp"
    params = sections["params"]
    archive = np.load(tmp_path / "m.npz")
    blocks = footer["meta"]["blocks"]
    assert sorted(archive.files) == sorted(b["name"] for b in blocks)
    for b in blocks:  # the same run twice (same seed) gives the same bits, block by block
        n = int(np.prod(b["shape"]))
        assert archive[b["name"]].shape == tuple(b["shape"])
        assert archive[b["name"]].dtype == np.float32
        assert np.array_equal(archive[b["name"]].ravel(), params[b["offset"]:b["offset"] + n])
    scored = last_json(run("evaluate", "--model-file", "m.troupe", cwd=tmp_path).stdout)
    assert scored["test_accuracy"] == trained["test_accuracy"]
    assert scored["samples"] == 10000
    assert scored["source"]["command"] == "troupe train-local"


def test_a_job_saves_its_final_parameters(tmp_path):
    for command in (["train", "--workers", "2", "--mode", "sync"],
                    ["launch", "--local", "--workers", "2", "--servers", "1", "--mode", "sync"]):
        result = last_json(run(*command, *SMALL, "--save-model", "job.troupe", cwd=tmp_path).stdout)
        _, sections = read_troupe_file(tmp_path / "job.troupe")
        assert fnv1a64(sections["params"].tobytes()) == result["params_fnv1a"], command[0]
        scored = last_json(run("evaluate", "--model-file", "job.troupe", cwd=tmp_path).stdout)
        assert scored["test_accuracy"] == result["test_accuracy"], command[0]
        assert scored["source"]["mode"] == "sync"


def test_a_language_models_jobs_and_evaluation_report_bits_per_character_and_a_sample(tmp_path):
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 60)
    text = ["--model", "gpt:layers=1,dim=16,heads=2", "--dataset", "text:corpus.txt", "--context", "16"]
    job = [*text, "--mode", "sync", "--optimizer", "adamw", "--lr", "0.01", "--metrics", "off"]
    for command in (["train", "--workers", "2"], ["launch", "--local", "--workers", "2", "--servers", "1"]):
        r = run(*command, *job, "--epochs", "2", "--sample", "30", "--save-model", "lm.troupe", cwd=tmp_path)
        result = last_json(r.stdout)
        bits = result["validation_bits_per_char"]
        assert 0 < bits < np.log2(28), command[0]  # below a uniform guess over the text's 28 characters
        assert len(result["sample"]) == 31, command[0]  # the first character, then 30 more (ASCII)
        assert set(result["sample"]) <= set("the quick brown fox jumps over the lazy dog."), command[0]
        epochs = [line for line in r.stderr.splitlines() if "epoch 2/2:" in line]
        assert epochs and "bits per character" in epochs[0], command[0]
        assert "a sample of 30 characters" in r.stderr, command[0]
        scored = last_json(run("evaluate", "--model-file", "lm.troupe", *text[2:], "--sample", "10",
                               cwd=tmp_path).stdout)
        assert abs(scored["validation_bits_per_char"] - bits) < 1e-3, command[0]  # summed in other batches
        assert len(scored["sample"]) == 11, command[0]
    quiet = last_json(run("train", *job, "--epochs", "1", "--sample", "0", cwd=tmp_path).stdout)
    assert "validation_bits_per_char" in quiet and "sample" not in quiet
    images = last_json(run("train", *SMALL, cwd=tmp_path).stdout)
    assert "validation_bits_per_char" not in images and "sample" not in images


def test_a_run_from_a_file_starts_where_the_file_left_off(tmp_path):
    first = last_json(run("train-local", "--epochs", "1", "--train-samples", "2000", "--save-model", "a.troupe",
                          cwd=tmp_path).stdout)
    again = run("train-local", "--epochs", "1", "--train-samples", "2000", "--init-from", "a.troupe", cwd=tmp_path)
    assert "starts from the parameters in a.troupe" in again.stderr
    assert last_json(again.stdout)["test_accuracy"] > first["test_accuracy"]


def test_bad_model_files_and_paths_are_refused_by_name(tmp_path):
    run("train-local", "--epochs", "1", "--train-samples", "500", "--save-model", "m.troupe", cwd=tmp_path)
    r = run("train-local", "--model", "cnn", *SMALL[:4], "--init-from", "m.troupe", cwd=tmp_path, check=False)
    assert r.returncode == 1 and "holds model 'mlp'" in r.stderr
    run("train-local", "--epochs", "1", "--train-samples", "500", "--save-model", "m.npz", cwd=tmp_path)
    r = run("evaluate", "--model-file", "m.npz", cwd=tmp_path, check=False)
    assert r.returncode == 1 and "a .npz archive is for other frameworks" in r.stderr
    data = bytearray((tmp_path / "m.troupe").read_bytes())
    data[100] ^= 0x01
    (tmp_path / "bad.troupe").write_bytes(bytes(data))
    r = run("evaluate", "--model-file", "bad.troupe", cwd=tmp_path, check=False)
    assert r.returncode == 1 and "fails its CRC-32C check" in r.stderr
    r = run("evaluate", "--model-file", "m.troupe", "--augment", "crop", cwd=tmp_path, check=False)
    assert r.returncode == 2 and "augmentation applies to training only" in r.stderr
    r = run("train-local", "--epochs", "1", "--save-model", "/proc/none/m.troupe", cwd=tmp_path, check=False)
    assert r.returncode == 1 and "--save-model: cannot create a file in /proc/none" in r.stderr
    assert "epoch" not in r.stderr  # refused before any training
    r = run("train", "--simulate-compute", "1", "--save-model", "s.troupe", cwd=tmp_path, check=False)
    assert r.returncode == 2 and "--simulate-compute trains no real parameters" in r.stderr
    r = run("launch", "--local", "--dry-run", "--save-model", "k.troupe", "--", "true", cwd=tmp_path, check=False)
    assert r.returncode == 2 and "a key-value job's model is its members' own" in r.stderr
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporaries left


@pytest.mark.parametrize("flag", ["--model-file"])
def test_evaluate_requires_a_model_file(tmp_path, flag):
    r = run("evaluate", cwd=tmp_path, check=False)
    assert r.returncode != 0 and flag in r.stderr
