"""Tests for troupe._ordered_calls (client/python/troupe/_ordered_calls.py): calls run one
at a time in the order they were submitted, a blocking call runs on the caller's thread
only when nothing is queued or running and else waits its turn, errors reach whoever
synchronizes, a handle is synchronized once, and close() runs what is queued before it
stops. Every wait is bounded."""
import threading

import pytest

import troupe
from troupe._ordered_calls import OrderedCalls

WAIT = 10.0  # seconds: a bound on every wait, never reached when the code is right


def test_calls_run_in_submission_order_one_at_a_time():
    calls = OrderedCalls()
    try:
        gate, log, running = threading.Event(), [], []

        def make(i):
            def f():
                running.append(i)
                assert len(running) == 1, "two calls ran at once"
                if i == 0:
                    assert gate.wait(WAIT)
                log.append(i)
                running.pop()
                return i * 10
            return f

        handles = [calls.submit(make(i)) for i in range(5)]
        assert not calls.poll(handles[4])  # the first call holds the line
        gate.set()
        assert [calls.synchronize(h) for h in reversed(handles)] == [40, 30, 20, 10, 0]
        assert log == [0, 1, 2, 3, 4]
    finally:
        calls.close()


def test_a_blocking_call_runs_here_when_idle_and_waits_its_turn_when_not():
    calls = OrderedCalls()
    try:
        here = threading.get_ident()
        assert calls.call(threading.get_ident) == here  # nothing queued: on this thread
        gate, log = threading.Event(), []
        first = calls.submit(lambda: (gate.wait(WAIT), log.append("queued")))
        waiter = threading.Thread(target=lambda: log.append(("blocking", calls.call(lambda: log.append("ran")))))
        waiter.start()
        gate.set()
        waiter.join(WAIT)
        assert not waiter.is_alive()
        calls.synchronize(first)
        assert log[:2] == ["queued", "ran"]  # behind the call made before it
    finally:
        calls.close()


def test_errors_reach_whoever_synchronizes_and_a_handle_is_used_once():
    calls = OrderedCalls()
    try:
        def fail():
            raise troupe.Error("not_finite", "rank 1's piece holds NaN")

        bad = calls.submit(fail)
        good = calls.submit(lambda: "after")
        with pytest.raises(troupe.Error) as e:
            calls.synchronize(bad)
        assert e.value.code == "not_finite"
        assert calls.synchronize(good) == "after"  # the failure stopped nothing after it
        with pytest.raises(troupe.Error) as e:
            calls.synchronize(good)
        assert e.value.code == "bad_job" and "synchronized once" in str(e.value)
        with pytest.raises(troupe.Error) as e:
            calls.call(fail)  # a blocking call raises on the spot
        assert e.value.code == "not_finite"
    finally:
        calls.close()


def test_close_runs_what_is_queued_then_refuses_more():
    calls = OrderedCalls()
    gate, log = threading.Event(), []
    calls.submit(lambda: gate.wait(WAIT))
    for i in range(3):
        calls.submit(lambda i=i: log.append(i))
    gate.set()
    calls.close()
    assert log == [0, 1, 2]
    with pytest.raises(troupe.Error) as e:
        calls.submit(lambda: None)
    assert e.value.code == "closed"
    calls.close()  # twice is harmless
