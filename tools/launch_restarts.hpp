// launch_restarts: when `launch` starts a job again after it lost a node, and how the next
// attempt resumes from the job's checkpoints (Note [Restarting a job]).
#pragma once

#include <string>
#include <vector>

#include "net/process_group.hpp"

namespace troupe::cli {

// Note [Restarting a job]
// A job that keeps checkpoints and lost a node is started again, every process, from its
// newest complete checkpoint (the coordinator gets --resume DIR), up to --max-restarts
// times, as torchrun's elastic agent restarts its workers. A lost node is a process that
// died of a signal launch did not send, or a coordinator that says its job lost a node
// (exit code 3: a shard server, every worker, or a stall). The restarted job repeats the
// steps since that checkpoint; in sync on the same workers it ends bitwise as it would
// have without the loss. A job that failed otherwise (a diverged loss, bad data, a bad
// flag) is not restarted: it would fail the same way again.
bool lost_a_node(const group_result& g);

// The coordinator of the next attempt resumes from dir's newest complete checkpoint (as
// launch sees dir; over ssh it must be a shared file system to be seen here); with none,
// the job starts again from its beginning.
void resume_next_attempt(std::vector<child_spec>& nodes, const std::string& dir);

}  // namespace troupe::cli
