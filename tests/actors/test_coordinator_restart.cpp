// Tests for actors/coordinator_restart.cpp (Note [Restarting in place]) under CAF's
// deterministic scheduler, with real shard servers and scripted workers: a job that keeps
// checkpoints and loses a shard server stops its other shards and workers with
// `restarting`, takes the nodes that join again into a fresh core, and ends well with the
// restart counted; a restart with no complete checkpoint starts from the beginning; one
// whose newest complete checkpoint cannot be read ends the job with checkpoint_failed,
// naming it; a shard lost after every worker finished, before the end checkpoint was
// complete, ends the job at once saying what to do (Note [A shard lost after
// training] in core/job_epochs.cpp). The committer's thread answers, so the tests step the scheduler until a
// bounded deadline.
#define BOOST_TEST_MODULE coordinator_restart
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <thread>

#include "actors/coordinator.hpp"
#include "actors/shard_server.hpp"
#include "core/checkpoint_store.hpp"
#include "tensor/tensor_file.hpp"
#include "tests/support/caf_fixture.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tiny_job.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

struct worker_log {
  std::optional<worker_welcome> welcome;
  caf::error join_error;
  caf::error exit_reason;  // how it was stopped, if it was
};

// A worker that joins, records how it is stopped, and reports epochs and its end when told.
caf::behavior scripted_worker(caf::event_based_actor* self, coordinator_actor c, worker_log* log) {
  self->set_exit_handler([=](caf::exit_msg& m) {
    log->exit_reason = m.reason;
    self->quit(m.reason);
  });
  self->request(c, caf::infinite, join_atom::value, worker_join{"job-under-test", {}, 0, {}, {}, -1})
      .then([=](worker_welcome& w) { log->welcome = std::move(w); },
            [=](caf::error& e) {
              log->join_error = e;
              self->quit();
            });
  return {
      [=](epoch_atom, std::int32_t epoch) {
        const std::uint32_t rank = log->welcome->place.rank;
        self->send(c, progress_atom::value, step_report{rank, epoch + 1, epoch, 0.5, 50});
        self->send(c, epoch_atom::value, worker_epoch{rank, epoch, 0.5, 1, 50, 0.01, tensor()});
      },
      [=](done_atom, std::int64_t clock) {
        self->send(c, done_atom::value, worker_done{log->welcome->place.rank, clock, 0, 0});
        self->quit();
      },
  };
}

struct fixture : test::deterministic_system {
  test::temp_dir dir{"coordinator-restart"};
  job_spec job;
  local_coordinator_actor coord;
  std::vector<local_shard_actor> shards;
  std::vector<caf::actor> workers;
  std::vector<std::unique_ptr<worker_log>> logs;
  std::optional<caf::expected<job_result>> outcome;

  fixture() {
    job = test::tiny_job(sync_mode::async);
    job.simulate_compute_ms = 1;  // no evaluator: nothing here runs detached but the committer
    job.checkpoints.dir = dir.file("ck");
    job.checkpoints.on_shard_loss = shard_loss::recover;
    // The scripted workers push nothing, so the shards write no final checkpoint: the
    // coordinator gives up waiting for it after the request timeout.
    job.request_timeout_ms = 300;
  }
  void boot() {
    auto m = build_model(job);
    BOOST_REQUIRE(m.has_value());
    coord = own(spawn_coordinator(*sys, job, *m, nullptr, {}));
    sys->spawn([this](caf::event_based_actor* self) {
      self->request(coord, caf::infinite, run_request{})
          .then([this](job_result& r) { outcome = caf::expected<job_result>(std::move(r)); },
                [this](caf::error& e) { outcome = caf::expected<job_result>(std::move(e)); });
    });
    join_cluster();
  }
  // Every shard and worker of the job joins (again).
  void join_cluster() {
    for (std::uint32_t s = 0; s < job.servers; ++s) {
      shards.push_back(own(spawn_shard_server(*sys, coord, "job-under-test", std::chrono::seconds(10))));
      join_as_shard(shards.back(), {}, 0);
    }
    for (std::uint32_t w = 0; w < job.workers; ++w) {
      logs.push_back(std::make_unique<worker_log>());
      workers.push_back(own(sys->spawn(scripted_worker, coord, logs.back().get())));
    }
  }
  // Steps the scheduler until pred holds or 10 s have passed. The committer's thread
  // mails the coordinator from outside the scheduler, in real time, so the scheduler's
  // clock follows the real one: firing every pending timeout at once instead would
  // time out a join that waits on that thread whenever the machine is slow.
  template <class Pred>
  bool until(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    auto last = std::chrono::steady_clock::now();
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      sched->advance_time(now - last);
      last = now;
      sched->run();
      if (pred()) return true;
      if (now > deadline) return false;
      std::this_thread::sleep_for(2ms);
    }
  }
  bool welcomed(std::size_t first) {
    for (std::size_t w = first; w < logs.size(); ++w)
      if (!logs[w]->welcome) return false;
    return true;
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_lost_shard_restarts_the_job_with_the_nodes_that_join_again, fixture) {
  boot();
  BOOST_REQUIRE(until([&] { return welcomed(0); }));
  caf::anon_send_exit(shards[1], caf::exit_reason::kill);
  sched->run();
  BOOST_TEST(!outcome.has_value());  // the job did not end
  for (std::size_t w = 0; w < 2; ++w)
    BOOST_TEST((troupe_code(logs[w]->exit_reason) == errc::restarting), describe(logs[w]->exit_reason));
  // Its nodes join again; with no complete checkpoint the job starts from its beginning.
  join_cluster();
  BOOST_REQUIRE(until([&] { return welcomed(2); }));
  BOOST_TEST(logs[2]->welcome->place.resume_clock == 0);
  for (std::size_t w = 2; w < 4; ++w) {
    caf::anon_send(workers[w], epoch_atom::value, std::int32_t{0});
    caf::anon_send(workers[w], epoch_atom::value, std::int32_t{1});
    caf::anon_send(workers[w], done_atom::value, std::int64_t{2});
  }
  BOOST_REQUIRE(until([&] { return outcome.has_value(); }));
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(*outcome), (*outcome ? "" : describe(outcome->error())));
  BOOST_TEST((*outcome)->restarts_in_place == 1);
  BOOST_TEST((*outcome)->workers_lost == 0);  // the workers it stopped were not lost
}

BOOST_FIXTURE_TEST_CASE(a_restart_whose_newest_checkpoint_cannot_be_read_ends_the_job_naming_it, fixture) {
  // A complete checkpoint whose files are not this job's.
  const checkpoint_store store(job.checkpoints.dir, 2);
  auto d = store.begin(1);
  BOOST_REQUIRE(d.has_value());
  BOOST_REQUIRE(!write_tensor_file(*d / "shard-0.tf", "test", {}, {}));
  BOOST_REQUIRE(!store.commit(1, {"shard-0.tf"}, {}));
  boot();
  BOOST_REQUIRE(until([&] { return welcomed(0); }));
  caf::anon_send_exit(shards[0], caf::exit_reason::kill);
  BOOST_REQUIRE(until([&] { return outcome.has_value(); }));
  BOOST_REQUIRE(!static_cast<bool>(*outcome));
  BOOST_TEST((troupe_code(outcome->error()) == errc::checkpoint_failed), describe(outcome->error()));
  BOOST_TEST(describe(outcome->error()).find("cannot restart in place from " + job.checkpoints.dir) !=
                 std::string::npos,
             describe(outcome->error()));
}

BOOST_FIXTURE_TEST_CASE(a_shard_lost_after_training_before_the_end_checkpoint_ends_the_job_at_once, fixture) {
  boot();
  BOOST_REQUIRE(until([&] { return welcomed(0); }));
  for (std::size_t w = 0; w < 2; ++w) {
    caf::anon_send(workers[w], epoch_atom::value, std::int32_t{0});
    caf::anon_send(workers[w], epoch_atom::value, std::int32_t{1});
    caf::anon_send(workers[w], done_atom::value, std::int64_t{2});
  }
  sched->run();  // training is over; the end checkpoint is still awaited (no time passes)
  BOOST_REQUIRE(!outcome.has_value());
  caf::anon_send_exit(shards[1], caf::exit_reason::kill);
  BOOST_REQUIRE(until([&] { return outcome.has_value(); }));
  BOOST_REQUIRE(!static_cast<bool>(*outcome));
  const std::string why = describe(outcome->error());
  BOOST_TEST((troupe_code(outcome->error()) == errc::shard_lost), why);
  BOOST_TEST(why.find("after workers 0, 1 had finished") != std::string::npos, why);
  BOOST_TEST(why.find("(none is)") != std::string::npos, why);  // so no --resume to suggest
  BOOST_TEST(why.find("run it again") != std::string::npos, why);
}
