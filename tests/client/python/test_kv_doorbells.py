"""Tests for a user's loop's doorbells (Note [Doorbells] in transport/doorbell.hpp;
client/kv_member_bells.cpp): two launched workers on one host push and pull a key whose
tensor lies in shared memory, and once its channel is confirmed the calls' messages go
through the channel's bell block, with the same values as over TLS (--no-doorbells, where
none rings). A sync pull the shard holds past the request timeout fails as timed_out
through the doorbell, which then closes, and the loop goes on with its calls as messages
and the right values."""
import re

import pytest

from launching import launched

np = pytest.importorskip("numpy")

ROUNDS = """
    import os
    import numpy as np
    import troupe

    kv = troupe.kv.create("dist")
    n = 65536  # above the size that goes in the message, so the tensor is in a slot
    kv.init("w", np.zeros(n, np.float32))
    out = np.zeros(n, np.float32)
    for r in range(5):
        kv.wait(kv.push("w", np.full(n, kv.rank + 1, np.float32)))
        kv.wait(kv.pull("w", out=out))
        os.write(1, f"RESULT {kv.rank} {r} {out.min()} {out.max()}\\n".encode())
    kv.close()
"""


def results(p):
    return sorted(re.findall(r"RESULT (\d) (\d) (\S+) (\S+)", p.stdout + p.stderr))


@pytest.mark.parametrize("flags", [(), ("--no-doorbells",)])
def test_calls_ring_the_channels_doorbell_with_the_same_values_as_over_tls(tmp_path, flags):
    p = launched(tmp_path, ROUNDS, "--servers", "1", "--mode", "sync", *flags)
    rows = results(p)
    assert len(rows) == 10, p.stderr[-3000:]
    for rank, r, lo, hi in rows:  # each round's value is the sum of both pushes: 1 + 2
        assert float(lo) == float(hi) == 3.0, rows
    rang = [w for w in "01" if f"troupe.kv (worker {w}): sends its pushes and pulls to shard 0 through the " +
            "channel's doorbell" in p.stderr]
    assert rang == ([] if flags else ["0", "1"]), p.stderr[-3000:]


HELD = """
    import os
    import time
    import numpy as np
    import troupe

    kv = troupe.kv.create("dist")
    n = 65536
    kv.init("w", np.zeros(n, np.float32))
    out = np.zeros(n, np.float32)
    kv.wait(kv.push("w", np.ones(n, np.float32)))
    kv.wait(kv.pull("w", out=out))  # a pull answered in the slot: the channel rings from now on
    held = os.path.join(os.environ["TROUPE_TEST_DIR"], "held")
    if kv.rank == 0:
        kv.wait(kv.push("w", np.ones(n, np.float32)))
        try:
            kv.wait(kv.pull("w", out=out))  # held: worker 1 pushes only after it failed
            os.write(1, b"RESULT 0 answered\\n")
        except troupe.Error as e:
            os.write(1, f"RESULT 0 {e.code}\\n".encode())
        open(held, "w").close()
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(held) and time.monotonic() < deadline:
            time.sleep(0.01)
        kv.wait(kv.push("w", np.ones(n, np.float32)))
    for r in range(2):
        kv.wait(kv.push("w", np.ones(n, np.float32)))
        kv.wait(kv.pull("w", out=out))
        os.write(1, f"RESULT {kv.rank} value {out.min()} {out.max()}\\n".encode())
    kv.close()
"""


def test_a_pull_held_past_the_request_timeout_fails_and_the_loop_goes_on_in_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("TROUPE_TEST_DIR", str(tmp_path))
    p = launched(tmp_path, HELD, "--servers", "1", "--mode", "sync", "--request-timeout", "2")
    out = p.stdout + p.stderr
    assert "RESULT 0 timed_out" in out, out[-3000:]
    assert "troupe.kv (worker 0): stops using its doorbell to shard 0 (a call through it had no answer within " \
           "the request timeout (2000 ms))" in p.stderr, p.stderr[-3000:]
    # With no optimizer a sync round's value is the sum of its pushes: 1 + 1 in each round.
    values = sorted(re.findall(r"RESULT (\d) value (\S+) (\S+)", out))
    assert values == [(w, "2.0", "2.0") for w in "0011"], out[-3000:]
