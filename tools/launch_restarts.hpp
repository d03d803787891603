// launch_restarts: when `launch` starts a job again after it lost a node, how the next
// attempt resumes from the job's checkpoints (Note [Restarting a job]), and which
// workers an elastic allreduce job leaves out (Note [Leaving out lost workers]).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "core/job.hpp"
#include "tools/process_group.hpp"

namespace troupe::cli {

// Note [Restarting a job]
// A job that keeps checkpoints and lost a node that is not started again alone
// (respawn_lost_nodes: a shard server of a job that restarts in place, the coordinator)
// is started again, every process, from its newest complete checkpoint (the coordinator
// gets --resume DIR), up to --max-restarts times, as torchrun's elastic agent restarts
// its workers. A lost node is a process that
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

// Note [Leaving out lost workers]
// `launch --min-workers N` makes an allreduce job elastic, as Horovod's `--min-np`: a
// replica whose worker process is lost for good is left out, and the ring re-forms from
// the survivors. A worker is lost for good when its process died of a signal launch did
// not send, or its ssh session ended with 255 (the host or the connection is gone); one
// that exited with an error of its own is not (the others of a stopped ring do too), and
// launch stopping it after the job ended is not. With pipeline stages every process of
// the lost replica goes. The survivors are numbered again in their order (worker 2 of 3
// goes on as worker 1 when worker 1 is lost), and the next coordinator gets `--workers`
// with their number; with --resume (resume_next_attempt) the job then rolls back to its
// newest complete checkpoint, Horovod's last commit, with the sampler re-dealing the rest
// of the epoch over the survivors. So an elastic run is not bitwise the run that lost
// nothing (the ring's order and the shares differ); each of its steps still is the same
// on every survivor. The processes that go on are started again: the re-formed ring is
// new connections, ranks and mailboxes, which a fresh start sets up exactly as the first.
struct left_out {
  std::vector<std::string> workers;  // the lost workers' names, as this attempt called them
  std::uint32_t replicas = 0;        // how many replicas go on
};

// Leaves the lost workers' replicas out of `nodes` for the next attempt, given this
// attempt's outcome `g`, `replicas` replicas of `stages` processes each, and at least
// `min_replicas` to go on with. No worker lost for good: nothing changes (left_out's
// workers empty). Fewer survivors than min_replicas: a failure that says so, and nodes is
// left as it was.
expected<left_out> leave_out_lost_workers(std::vector<child_spec>& nodes, const group_result& g,
                                          std::uint32_t replicas, std::uint32_t stages, std::uint32_t min_replicas);

// Why launch cannot make this --mode allreduce job elastic with its `--min-workers` and
// `max_restarts`; nullopt when it can, or when it does not ask (validate() checks the
// rest, for every job).
std::optional<std::string> elastic_refusal(const job_spec& job, int max_restarts);

struct restart_policy {
  std::string checkpoints;           // where the next attempt resumes from; empty: never restart
  int max_restarts = 3;
  std::uint32_t min_workers = 0;     // > 0: leave lost workers out (Note [Leaving out lost workers])
  std::uint32_t replicas = 0, stages = 1;
  bool workers_end_the_job = false;  // a key-value job: once its workers are gone it is over
  std::chrono::milliseconds grace{15000};  // for the others once the job has ended
};

struct attempts {
  group_result last;                  // the last attempt's outcome
  int restarts = 0;
  std::vector<std::string> left_out;  // the workers left out, as their attempts called them
};

// Note [Restarting in place] (actors/coordinator_restart.cpp): a process lost while the
// others go on is started again alone, up to max_restarts times each, when the job keeps
// checkpoints (the policy's):
//   - a shard server, when the job restarts in place after losing one
//     (restarts_on_shard_loss), or a key-value job replaces it while its loops go on
//     (Note [Replacing a key-value shard]); the coordinator and the other processes stay up;
//   - the coordinator, with --resume from the newest complete checkpoint; the servers
//     and workers, given --coordinator-timeout, wait for it and join it again (Note
//     [Joining again] in net/node.cpp). It cannot record how far the job had got, so the
//     resumed run's steps_replayed is null. Not a key-value job's: its workers, users'
//     programs, do not join a coordinator again, so the whole job starts again.
// Other losses (every worker, an allreduce replica, a stall) start the whole job again.
inline constexpr const char* coordinator_wait_s = "60";  // --coordinator-timeout the nodes get
void respawn_lost_nodes(std::vector<child_spec>& nodes, const job_spec& job, const restart_policy& policy);

// Runs the job's processes (the coordinator leads), and again after each loss the policy
// allows, saying each time on stderr what it starts again and from where.
attempts run_with_restarts(std::vector<child_spec>& nodes, const restart_policy& policy);

}  // namespace troupe::cli
