"""troupe.Error: every failure of a store or a job, with Troupe's error code.

``code`` is the name of the code ("bad_shape", "no_such_key", "timed_out", "closed",
"shard_lost", ...); the message says what is wrong and what to do.
"""


class Error(RuntimeError):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
