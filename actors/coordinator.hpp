// The coordinator actor: the shell around job_core (core/job_core.hpp), which holds the
// job's logic and failure policy. The shell decodes each message into a call of the core,
// keeps the handles and response promises the core names by rank, shard index or ticket,
// and carries out the actions the core returns: welcomes and refusals, requests to the
// shards and the evaluator (whose answers go back to the core), relays, progress lines,
// and at the end the result for every run request and the exit of every member.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/protocol.hpp"
#include "core/job_checkpoint.hpp"
#include "core/job_ledger.hpp"
#include "monitoring/observability.hpp"
#include "monitoring/refusals.hpp"
#include "train/dataset.hpp"
#include "train/model.hpp"

namespace troupe {

struct job_callbacks {
  std::function<void(const epoch_summary&)> on_epoch;
  std::function<void(const std::string&)> on_event;  // a worker lost, a group formed...
};

// Why a join was refused: counted under `why`, logged once per node with `reason`.
struct join_refusal {
  monitoring::refusal why;
  std::string reason;
};

// Decides whether a join may proceed: whether it proves the job's secret (Note [Join
// proofs] in net/job_secret.hpp) and came under a certificate of its role (Note
// [Certificate roles] in net/tls_handshake_guard.cpp). Given role "server" or "worker",
// the join's proof, and the joining node as CAF names it; nullopt admits. Empty: every
// join is admitted (one process, where nothing can reach it).
using join_gate = std::function<std::optional<join_refusal>(const char* role, const std::string& proof,
                                                            const std::string& node)>;

// job must be prepared and valid (see prepare_job in core/job.hpp) and m must be
// its model; data is used for evaluation only (none with simulated compute). A
// key-value job (job.kv) has neither: an empty model and no data. The handle
// is the local one: run_request waits for the job's result. Publish it as a
// coordinator_actor. resume: the job goes on from that checkpoint (Note [Resuming a job]).
local_coordinator_actor spawn_coordinator(caf::actor_system& sys, job_spec job, const model& m,
                                          std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                          observability obs = {}, join_gate gate = {},
                                          std::optional<resume_point> resume = std::nullopt);

}  // namespace troupe
