// Tests for a key-value job with no shard servers, --mode allreduce with a command (Note
// [A ring of users' loops] in client/kv_member_ring.cpp), run by job_core without CAF:
// it starts once its workers joined, each welcome names the member's ring neighbours by
// the addresses they joined with, a member past the ring's is refused before and after
// the start, keys are refused saying why, a lost member ends the job with stage_lost
// naming it, and the flags a ring cannot take are refused by validate().
#define BOOST_TEST_MODULE job_ring_keys
#include <boost/test/unit_test.hpp>

#include "core/job_core.hpp"
#include "tests/support/actions.hpp"

using namespace troupe;
using namespace troupe::job_actions;
using test::all_of;
using test::only;

namespace {

const auto t0 = job_clock::time_point{};

job_spec ring_job(std::uint32_t workers) {
  job_spec job;
  job.job_id = "job-ring";
  job.kv = true;
  job.mode = sync_mode::allreduce;
  job.workers = workers;
  job.servers = 0;
  return job;
}

worker_join join_from(std::uint16_t port) { return worker_join{"job-ring", "10.0.0." + std::to_string(port), port, "", "", -1}; }

}  // namespace

BOOST_AUTO_TEST_CASE(the_welcomes_name_each_members_ring_neighbours_and_a_fourth_is_refused) {
  BOOST_TEST(!validate(ring_job(3)).has_value());
  job_core core(ring_job(3), model::none(), {}, t0);
  job_actions_list last;
  for (std::uint16_t p = 1; p <= 3; ++p) last = core.on_member_join(p, join_from(p), t0);
  auto refused = only<refuse>(core.on_member_join(4, join_from(4), t0));
  BOOST_TEST((refused.why.code == errc::cluster_full));
  BOOST_TEST(refused.why.detail.find("ring already has its 3 workers") != std::string::npos, refused.why.detail);
  auto welcomes = all_of<welcome_member>(last);  // no shards to start: the welcomes come at once
  BOOST_REQUIRE_EQUAL(welcomes.size(), 3u);
  BOOST_REQUIRE(core.phase() == job_phase::training);
  for (const auto& w : welcomes) {
    const auto& a = w.assignment;
    const std::uint32_t r = a.rank;
    BOOST_TEST(a.world == 3u);
    BOOST_TEST((a.ring == std::vector<std::uint32_t>{0, 1, 2}));
    BOOST_TEST(a.ring_prev_port == (r + 2) % 3 + 1);  // rank r joined from port r + 1
    BOOST_TEST(a.ring_next_port == (r + 1) % 3 + 1);
    BOOST_TEST(a.ring_next_host == "10.0.0." + std::to_string((r + 1) % 3 + 1));
  }
  BOOST_TEST((only<refuse>(core.on_member_join(5, join_from(5), t0)).why.code == errc::cluster_full));
}

BOOST_AUTO_TEST_CASE(keys_are_refused_and_a_lost_member_ends_the_job_naming_it) {
  job_core core(ring_job(2), model::none(), {}, t0);
  core.on_member_join(1, join_from(1), t0);
  core.on_member_join(2, join_from(2), t0);
  tensor v = tensor::uninitialized({2});
  v.data<float>()[0] = v.data<float>()[1] = 0.f;
  auto init = only<refuse>(core.on_init(10, kv_init{0, "w", {2}, v, 0}));
  BOOST_TEST((init.why.code == errc::bad_job));
  BOOST_TEST(init.why.detail.find("--mode allreduce") != std::string::npos, init.why.detail);
  BOOST_TEST((only<refuse>(core.on_lookup(11, kv_lookup{0, "w"})).why.code == errc::bad_job));
  BOOST_TEST((only<refuse>(core.on_set_optimizer(12, kv_set_optimizer{})).why.code == errc::bad_job));
  const auto end = only<finish>(core.on_member_down(1, std::nullopt, "killed", t0));
  BOOST_REQUIRE(std::holds_alternative<fault>(end.outcome));
  const fault& f = std::get<fault>(end.outcome);
  BOOST_TEST((f.code == errc::stage_lost));
  BOOST_TEST(f.detail.find("worker 1 is gone (killed)") != std::string::npos, f.detail);
}

BOOST_AUTO_TEST_CASE(what_a_ring_of_users_loops_cannot_take_is_refused) {
  auto with = [](auto change) {
    job_spec job = ring_job(2);
    change(job);
    return validate(job).value_or("accepted");
  };
  BOOST_TEST(with([](job_spec& j) { j.servers = 1; }).find("no shard servers") != std::string::npos);
  BOOST_TEST(with([](job_spec& j) { j.checkpoints.dir = "/tmp/x", j.checkpoints.every = 5; })
                 .find("save them from the loop") != std::string::npos);
  BOOST_TEST(with([](job_spec& j) { j.min_workers = 1; }).find("cannot go on without a worker") != std::string::npos);
  BOOST_TEST(with([](job_spec& j) { j.mode = sync_mode::sync; }).find("needs --servers >= 1") != std::string::npos);
}
