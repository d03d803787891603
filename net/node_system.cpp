// node_system: a node's actor system and its watched teardown (Note [A node's teardown]).
#include "net/node_system.hpp"

#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>

#include "base/watched_teardown.hpp"
#include "net/node_runtime.hpp"

namespace troupe {

namespace {

// Note [A node's teardown]
// When its role's actor has stopped, a node destroys its actor system on the main thread
// (on any other thread CAF's teardown never finished: measured, every role) and leaves.
// The teardown takes milliseconds. CAF waits for every actor, and for the thread of every
// detached actor until that actor is destroyed, so an actor that never stops, or one that
// stopped but is still referenced, would hold the process until its launcher kills it.
// The second happens: in about 1 of 40 launches of a 3-replica allreduce job on this
// machine (and in CI), a worker's teardown waited forever in await_detached_threads for
// its stage's thread; the stage had stopped and left CAF's registry, and one strong
// reference to it was still held (seen with gdb; who holds it inside CAF is not known).
// So a watcher thread (base/watched_teardown) warns after limits.warn_after, naming how
// many actors CAF still counted as running and how many references the stopped role's
// actor still has; and a server or worker whose teardown is not over after
// limits.leave_after leaves without it. Its role's end is decided by then (its results
// are sent, its checkpoints written, its segments unmapped with its state), so it says
// and finishes what its caller would have (stuck_teardown_exit) and exits with the
// role's code, inside the grace launch gives nodes after a job (15 s). A coordinator
// concludes its job before its teardown (prints the result or the error, saves the
// model: coordinator_end in net/node.hpp), so it leaves the same way, with that
// conclusion's exit code.
constexpr teardown_limits limits{std::chrono::seconds(3), std::chrono::seconds(8)};

// Note [The role's last words]
// A role's down reaches its remote monitors (its ring and pipeline neighbours' proxies of
// it) through CAF's BASP broker, which handles it on the middleman's thread, while the
// node's main thread hears of the same down at the same moment and would tear the
// middleman down at once. Had the broker not had its turn yet, the neighbours would see
// the connection close instead (remote_link_unreachable), and a replica that finished
// would look dead to one still finishing its last step, which then fails the job (seen
// once in about 180 launches of a 3-replica allreduce job; none in 218 with this wait).
// So before its teardown a node waits, at most a second each time, until the
// middleman's thread has run what was posted to it before, twice: the broker's turn with
// the down, then what that turn posted.
void let_middleman_catch_up(caf::actor_system& sys) {
  for (int round = 0; round < 2; ++round) {
    auto caught_up = std::make_shared<std::promise<void>>();
    auto done = caught_up->get_future();
    sys.middleman().backend().post([caught_up] { caught_up->set_value(); });
    if (done.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return;
  }
}

}  // namespace

node_system::node_system(const node_plan& plan) {
  raise_fd_limit();
  configure_node(cfg_, plan);
  sys_.emplace(cfg_);
}

node_system::~node_system() {
  let_middleman_catch_up(*sys_);
  const std::size_t running = sys_->registry().running();
  const auto warn = [&] {
    const auto* role = role_.get();
    spdlog::warn("the node's actor system has not stopped {} s after its role ended ({} actors were running "
                 "when it began{})",
                 std::chrono::duration_cast<std::chrono::seconds>(limits.warn_after).count(), running,
                 role ? "; the role's actor, which stopped, still has " + std::to_string(role->strong_refs.load()) +
                            " references"
                      : std::string());
  };
  const auto leave = [&] {
    spdlog::error("the node's actor system has not stopped {} s after its role ended; the node leaves without "
                  "waiting for it",
                  std::chrono::duration_cast<std::chrono::seconds>(limits.leave_after).count());
    const int code = leave_(role_end_);
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(code);
  };
  watched_teardown([&] { sys_.reset(); }, limits, warn, leave_ ? std::function<void()>(leave) : nullptr);
}

}  // namespace troupe
