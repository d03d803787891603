// Tests for actors/coordinator.cpp, the shell around job_core, under CAF's deterministic
// scheduler with real shard servers and scripted workers: that the shell wires the core
// to the actors. Admission waits for the whole cluster and refuses foreign nodes; a
// member standing by replaces the first to die and is served by the shards; a worker
// that dies mid-round does not stall sync; the job's result reaches the run request; a
// dead shard, a diverged worker and a stall end the job with their typed errors. The
// core's every case is stepped without actors in tests/core/test_job_core.cpp.
#define BOOST_TEST_MODULE coordinator
#include <boost/test/unit_test.hpp>

#include <thread>

#include "actors/coordinator.hpp"
#include "actors/shard_server.hpp"
#include "tests/support/caf_fixture.hpp"
#include "tests/support/tiny_job.hpp"

using namespace troupe;

namespace {

job_spec tiny_job(sync_mode mode) {
  job_spec j = test::tiny_job(mode);
  j.simulate_compute_ms = 1;  // no evaluator: nothing here runs detached
  return j;
}

struct worker_log {
  std::optional<worker_welcome> welcome;
  caf::error join_error;
  std::vector<kv_pull_reply> params;
  std::vector<kv_push_ack> acks;
  std::vector<caf::error> errors;
};

// A worker whose every step the test triggers by hand.
caf::behavior scripted_worker(caf::event_based_actor* self, coordinator_actor c, std::string job_id, worker_log* log) {
  self->request(c, caf::infinite, join_atom::value, worker_join{job_id, {}, 0, {}, {}, -1})
      .then([=](worker_welcome& w) { log->welcome = std::move(w); },
            [=](caf::error& e) {
              log->join_error = e;
              self->quit();
            });
  return {
      [=](pull_atom, std::int64_t clock) {
        const auto& w = *log->welcome;
        for (std::uint32_t s = 0; s < w.shards.size(); ++s)
          self->request(w.shards[s], caf::infinite, pull_atom::value, step_pull(s, w.place.rank, 0, clock))
              .then([=](kv_pull_reply& p) { log->params.push_back(std::move(p)); },
                    [=](caf::error& e) { log->errors.push_back(e); });
      },
      [=](push_atom, std::int64_t clock) {
        const auto& w = *log->welcome;
        for (std::uint32_t s = 0; s < w.shards.size(); ++s)
          self->request(w.shards[s], caf::infinite, push_atom::value,
                        step_push(s, w.place.rank, 0, clock, clock, tensor({w.place.table.shard_numel[s]})))
              .then([=](const kv_push_ack& a) { log->acks.push_back(a); },
                    [=](caf::error& e) { log->errors.push_back(e); });
      },
      [=](epoch_atom, std::int32_t epoch) {
        self->send(c, progress_atom::value, step_report{log->welcome->place.rank, epoch + 1, epoch, 0.5, 50});
        self->send(c, epoch_atom::value, worker_epoch{log->welcome->place.rank, epoch, 0.5, 1, 50, 0.01, tensor()});
      },
      [=](done_atom, std::int64_t clock) {
        self->send(c, done_atom::value, worker_done{log->welcome->place.rank, clock, 0, 0});
        self->quit();
      },
      [=](caf::error& reason) { self->quit(reason); },  // dies the way a failing worker does
  };
}

struct fixture : test::deterministic_system {
  local_coordinator_actor coord;
  std::vector<local_shard_actor> shards;
  std::vector<caf::actor> workers;
  std::vector<std::unique_ptr<worker_log>> logs;
  std::optional<caf::expected<job_result>> outcome;

  void boot(job_spec job, std::uint32_t shard_count, std::uint32_t worker_count) {
    auto m = build_model(job);
    BOOST_REQUIRE(m.has_value());
    coord = own(spawn_coordinator(*sys, job, *m, nullptr, {}));
    for (std::uint32_t s = 0; s < shard_count; ++s) add_shard();
    for (std::uint32_t w = 0; w < worker_count; ++w) add_worker(job.job_id);
    sys->spawn([this](caf::event_based_actor* self) {
      self->request(coord, caf::infinite, run_request{})
          .then([this](job_result& r) { outcome = caf::expected<job_result>(std::move(r)); },
                [this](caf::error& e) { outcome = caf::expected<job_result>(std::move(e)); });
    });
    sched->run();
  }
  void add_shard() {
    shards.push_back(own(spawn_shard_server(*sys, coord, "job-under-test", std::chrono::seconds(10))));
    join_as_shard(shards.back(), {}, 0);
  }
  void add_worker(const std::string& job_id) {
    logs.push_back(std::make_unique<worker_log>());
    workers.push_back(own(sys->spawn(scripted_worker, coord, job_id, logs.back().get())));
  }
  template <class Atom, class... Ts>
  void tell(std::size_t w, Atom a, Ts... xs) {
    caf::anon_send(workers[w], a, xs...);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(admission_waits_for_the_whole_cluster, fixture) {
  boot(tiny_job(sync_mode::async), 1, 2);
  BOOST_TEST(!logs[0]->welcome.has_value());  // one shard is still missing
  add_shard();
  sched->run();
  BOOST_REQUIRE(logs[0]->welcome.has_value());
  BOOST_REQUIRE(logs[1]->welcome.has_value());
  BOOST_TEST(logs[0]->welcome->place.rank + logs[1]->welcome->place.rank == 1u);
  BOOST_TEST(logs[0]->welcome->shards.size() == 2u);
  BOOST_TEST(logs[0]->welcome->place.table.shard_numel.size() == 2u);
  add_worker("another-job");
  sched->run();
  BOOST_TEST((troupe_code(logs[2]->join_error) == errc::bad_job));
  BOOST_TEST(describe(logs[2]->join_error).find("another-job") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(an_extra_worker_stands_by_and_replaces_the_first_to_die, fixture) {
  boot(tiny_job(sync_mode::async), 2, 2);
  BOOST_REQUIRE(logs[1]->welcome.has_value());
  const std::uint32_t dying_rank = logs[1]->welcome->place.rank;
  add_worker("job-under-test");  // the job is full: this one waits
  sched->run();
  BOOST_TEST(!logs[2]->welcome.has_value());
  BOOST_TEST(!logs[2]->join_error);
  caf::anon_send_exit(workers[1], caf::exit_reason::kill);
  sched->run();
  BOOST_REQUIRE(logs[2]->welcome.has_value());
  BOOST_TEST(logs[2]->welcome->place.rank == dying_rank);
  // Its rank's share of epoch 0 (one step) went to the survivor (Note [Dealing a lost
  // worker's samples]): the replacement starts at epoch 1.
  BOOST_TEST(logs[2]->welcome->place.resume_clock == 1);
  // The replacement is a member of every shard: its pulls are served.
  tell(2, pull_atom::value, std::int64_t{0});
  sched->run();
  BOOST_TEST(logs[2]->params.size() == 2u);
  BOOST_TEST(logs[2]->errors.empty());
}

BOOST_FIXTURE_TEST_CASE(a_worker_dying_mid_round_does_not_stall_sync, fixture) {
  boot(tiny_job(sync_mode::sync), 2, 2);
  tell(0, pull_atom::value, std::int64_t{0});
  tell(1, pull_atom::value, std::int64_t{0});
  sched->run();
  BOOST_TEST(logs[0]->params.size() == 2u);
  tell(0, push_atom::value, std::int64_t{0});
  tell(0, pull_atom::value, std::int64_t{1});
  sched->run();
  BOOST_TEST(logs[0]->params.size() == 2u);  // held: worker 1 has not pushed round 0
  caf::anon_send_exit(workers[1], caf::exit_reason::kill);
  sched->run();
  BOOST_REQUIRE(logs[0]->params.size() == 4u);  // released on both shards
  BOOST_TEST(logs[0]->params[2].versions == std::vector<std::int64_t>{1});
  BOOST_TEST(logs[0]->params[3].versions == std::vector<std::int64_t>{1});
  // The survivor finishes the job alone.
  tell(0, epoch_atom::value, std::int32_t{0});
  tell(0, epoch_atom::value, std::int32_t{1});
  tell(0, done_atom::value, std::int64_t{2});
  sched->run();
  BOOST_REQUIRE(outcome.has_value());
  BOOST_REQUIRE_MESSAGE(static_cast<bool>(*outcome), (*outcome ? "" : describe(outcome->error())));
  BOOST_TEST((*outcome)->workers_lost == 1);
  BOOST_TEST((*outcome)->samples == 100);
  BOOST_TEST((*outcome)->mode == "sync");
  BOOST_TEST(!(*outcome)->evaluated);
}

BOOST_FIXTURE_TEST_CASE(a_dead_shard_ends_the_job, fixture) {
  boot(tiny_job(sync_mode::async), 2, 2);
  caf::anon_send_exit(shards[1], caf::exit_reason::kill);
  sched->run();
  BOOST_REQUIRE(outcome.has_value());
  BOOST_REQUIRE(!static_cast<bool>(*outcome));
  BOOST_TEST((troupe_code(outcome->error()) == errc::shard_lost));
  BOOST_TEST(describe(outcome->error()).find("shard 1") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(a_diverged_worker_ends_the_job, fixture) {
  boot(tiny_job(sync_mode::async), 2, 2);
  caf::anon_send(workers[0], make_error(errc::diverged, "loss became nan"));
  sched->run();
  BOOST_REQUIRE(outcome.has_value());
  BOOST_REQUIRE(!static_cast<bool>(*outcome));
  BOOST_TEST((troupe_code(outcome->error()) == errc::diverged));
}

BOOST_FIXTURE_TEST_CASE(losing_every_worker_ends_the_job, fixture) {
  boot(tiny_job(sync_mode::async), 2, 2);
  caf::anon_send_exit(workers[0], caf::exit_reason::kill);
  caf::anon_send_exit(workers[1], caf::exit_reason::kill);
  sched->run();
  BOOST_REQUIRE(outcome.has_value());
  BOOST_REQUIRE(!static_cast<bool>(*outcome));
  BOOST_TEST((troupe_code(outcome->error()) == errc::all_workers_lost));
}

BOOST_FIXTURE_TEST_CASE(no_progress_within_the_stall_timeout_ends_the_job, fixture) {
  job_spec job = tiny_job(sync_mode::async);
  job.stall_timeout_ms = 5;
  boot(job, 2, 2);
  BOOST_TEST(!outcome.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sched->trigger_timeouts();
  sched->run();
  BOOST_REQUIRE(outcome.has_value());
  BOOST_REQUIRE(!static_cast<bool>(*outcome));
  BOOST_TEST((troupe_code(outcome->error()) == errc::stalled));
  BOOST_TEST(describe(outcome->error()).find("worker 0 at clock 0") != std::string::npos);
}
