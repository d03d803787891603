// Child processes a launcher runs side by side: each with a name, its stdout and stderr
// streamed line by line to our stderr under a "[name] " prefix, except the lines of one
// chosen child's stdout, which are collected (the coordinator's final JSON line).
// SIGINT and SIGTERM to the launcher are passed on to every child, and every child gets
// SIGTERM when the launcher dies in any way (SIGKILL included).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace troupe {

struct child_spec {
  std::string name;               // "coordinator", "server 0", "worker 1"
  std::vector<std::string> argv;  // argv[0] is a path or a name looked up in PATH
  bool collect_stdout = false;    // keep this child's stdout lines instead of streaming them
  std::vector<std::pair<std::string, std::string>> env;  // set (or replaced) in the child's environment
  // stdin is a pipe the launcher holds open and never writes: the child reads EOF when the
  // launcher is gone, however it ended (an ssh session passes that on to the remote
  // command). Otherwise the child inherits the launcher's stdin.
  bool hold_stdin = false;
  // How many times the group starts this child again, with the same command, when it is
  // lost while the leader runs: killed by a signal the group did not send, or exited with
  // 255 (ssh's code when the remote end is gone). Note [Restarting in place]: a job's
  // coordinator takes a shard server that comes back.
  int respawns = 0;
  std::function<void(child_spec&)> before_respawn{};  // may change the command first (empty: the same)
};

struct child_result {
  std::string name;
  int exit_code = -1;             // -1: killed by a signal
  int signal = 0;
  bool stopped = false;           // the group signalled it (the launcher's signal passed on, or past its grace)
  int respawned = 0;              // times it was started again (child_spec::respawns); the fields above are its last run's
};

struct group_result {
  std::vector<child_result> children;
  std::vector<std::string> collected;  // stdout lines of the collect_stdout child
  bool interrupted = false;            // the launcher got SIGINT/SIGTERM
};

// Starts every child, streams their output, and returns when all have exited. When the
// child named `leader` exits, or every child named in `enders` has (a key-value job's
// workers: when they are all gone nothing can end the job), the others get `grace` to
// finish, then SIGTERM, then SIGKILL.
group_result run_process_group(const std::vector<child_spec>& children, const std::string& leader,
                               std::chrono::milliseconds grace, const std::vector<std::string>& enders = {});

// Runs one command to completion, its output streamed under `name`; returns its exit code.
int run_step(const std::string& name, const std::vector<std::string>& argv);

}  // namespace troupe
