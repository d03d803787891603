// bounded_teardown: runs a teardown (destroying what a process built, before it leaves)
// on a thread of its own and waits for it at most a deadline. A process about to exit
// must not be held by a teardown that cannot finish (an actor system waiting for an
// actor or a connection that never stops); past the deadline the teardown is left
// running, detached, and the caller learns it and goes on to exit.
#pragma once

#include <chrono>
#include <functional>

namespace troupe {

// True when `teardown` finished within `deadline`; false when it was still running
// then (it goes on, detached, and must not touch anything the caller destroys later).
bool bounded_teardown(std::function<void()> teardown, std::chrono::milliseconds deadline);

}  // namespace troupe
