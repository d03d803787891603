"""troupe._ordered_calls: the handles behind troupe.horovod's *_async calls.

One background thread runs a store's collectives one at a time, in the order they were
submitted: every worker must make its calls in the same order (Horovod's rule, and the
store's, which numbers unnamed calls in call order), and one thread keeps that order while
the caller goes on computing. A blocking call (call()) runs on the caller's thread when
nothing is queued or running, which saves the handoff (about 0.15 ms a call), and else
waits its turn. A handle is a whole number. poll(handle) says whether its
call is done; synchronize(handle) waits for it and returns its result, or raises its
error (troupe.Error). Every call is bounded by the store's timeout, so synchronize never
waits forever: a worker that dies fails the call with member_lost, a call the others never
make fails with timed_out. Ctrl-C interrupts a synchronize (the call itself runs on).
"""
import itertools
import queue
import threading

from .errors import Error


class _Call:
    __slots__ = ("done", "result", "error")

    def __init__(self):
        self.done = threading.Event()
        self.result = None
        self.error = None


class OrderedCalls:
    def __init__(self):
        self._pending = queue.Queue()  # (handle, function), or None: stop after what is queued
        self._calls = {}  # handle -> _Call, until synchronized
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        self._unfinished = 0  # calls submitted or running, not yet done
        self._turn = threading.Lock()  # held by whoever runs a call, so calls never overlap
        self._thread = threading.Thread(target=self._run, name="troupe-collectives", daemon=True)
        self._thread.start()

    def submit(self, function):
        """Queues function() (a store call) and returns its handle."""
        with self._lock:
            if self._closed:
                raise Error("closed", "troupe.horovod was shut down; call init() again")
            handle = next(self._ids)
            self._calls[handle] = _Call()
            self._unfinished += 1
        self._pending.put((handle, function))
        return handle

    def call(self, function):
        """function() in its turn, on this thread when no call is queued or running."""
        with self._lock:
            inline = not self._closed and self._unfinished == 0
            if inline:
                self._unfinished += 1  # a call submitted meanwhile waits behind this one
        if not inline:
            return self.synchronize(self.submit(function))
        try:
            with self._turn:
                return function()
        finally:
            with self._lock:
                self._unfinished -= 1

    def poll(self, handle):
        return self._call(handle).done.is_set()

    def synchronize(self, handle):
        call = self._call(handle)
        while not call.done.wait(0.1):  # in slices, so that Ctrl-C gets through
            pass
        with self._lock:
            self._calls.pop(handle, None)
        if call.error is not None:
            raise call.error
        return call.result

    def close(self):
        """Runs what is queued, then stops the thread; handles not yet synchronized are
        dropped (their calls still ran, so every worker made the same calls)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pending.put(None)
        self._thread.join()
        with self._lock:
            self._calls.clear()

    def _call(self, handle):
        with self._lock:
            call = self._calls.get(handle)
        if call is None:
            raise Error("bad_job", f"no call has handle {handle!r}: a handle comes from a *_async call and is "
                                   "synchronized once")
        return call

    def _run(self):
        while True:
            item = self._pending.get()
            if item is None:
                return
            handle, function = item
            with self._lock:
                call = self._calls[handle]
            with self._turn:
                try:
                    call.result = function()
                except BaseException as e:  # handed to whoever synchronizes
                    call.error = e
            with self._lock:
                self._unfinished -= 1
            call.done.set()
