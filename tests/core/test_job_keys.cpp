// Tests for core/job_keys.cpp (Note [Jobs of keys]), without CAF: a key-value job, run by
// the one job_core with an empty model, starts once its shards and
// members joined; the first init of a key defines it on its shards and every other init
// waits for that; a first init larger than one message arrives in chunks and is assembled
// in order (a chunk out of order, or one after its member left, is refused; a chunk of a
// key another member defined is answered with the layout); members get the ranks they
// ask for before the start, and a join while the shards start is admitted to them;
// shapes that would overflow, NaN values and other shapes are refused; barriers wait for
// the live members only; the job ends when every member has left, or when fewer than
// --min-workers are left; with --checkpoint-dir a lost shard is replaced from the newest
// checkpoint while the members go on (Note [Replacing a key-value shard]), or the job ends
// saying why it cannot be. The checkpoints under way at the job's end:
// test_job_key_checkpoints.
#define BOOST_TEST_MODULE job_keys
#include <boost/test/unit_test.hpp>

#include <limits>
#include <map>

#include "core/job_core.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/kv_job_core.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using namespace troupe::job_actions;
using test::all_of;
using test::kv_job;
using test::make;
using test::only;
using test::running;
using test::t0;

namespace {

tensor iota(std::int64_t n, std::int64_t from = 0) {
  tensor t = tensor::uninitialized({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(from + i);
  return t;
}

kv_init init_of(std::uint32_t worker, std::string name, std::vector<std::int64_t> dims, tensor value,
                std::int64_t offset = 0) {
  return kv_init{worker, std::move(name), std::move(dims), std::move(value), offset};
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_first_init_defines_and_the_others_wait_for_its_shards) {
  auto core = running();
  auto def = only<define_on_shards>(core.on_init(10, init_of(0, "s:w", {3000}, iota(3000))));
  BOOST_TEST(def.layout.parts.size() == 3u);  // split above the bound of 1000
  BOOST_TEST(test::same_bits(def.value, iota(3000)));
  BOOST_TEST(core.on_init(11, init_of(1, "s:w", {3000}, iota(3000, 7))).empty());  // waits; its value loses
  BOOST_TEST(core.on_lookup(12, kv_lookup{1, "s:w"}).empty());
  auto answers = all_of<answer_key>(core.defined(def.id));
  BOOST_REQUIRE_EQUAL(answers.size(), 3u);
  for (const auto& a : answers) BOOST_TEST(a.layout.name == "s:w");
  // Once defined, an init is answered at once; another shape is refused naming both.
  BOOST_TEST(only<answer_key>(core.on_init(13, init_of(1, "s:w", {3000}, iota(3000)))).t == 13u);
  auto wrong = only<refuse>(core.on_init(14, init_of(1, "s:w", {30, 100}, iota(3000))));
  BOOST_TEST((wrong.why.code == errc::bad_shape));
  BOOST_TEST(wrong.why.detail.find("(3000,)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_first_init_in_chunks_is_assembled_in_order) {
  auto core = running();
  auto first = only<answer_key>(core.on_init(10, init_of(0, "i:5", {10, 100}, iota(400), 0)));
  BOOST_TEST(first.layout.parts.empty());  // send the next chunk
  BOOST_TEST(
      only<answer_key>(core.on_init(11, init_of(0, "i:5", {10, 100}, iota(400, 400), 400))).layout.parts.empty());
  BOOST_TEST(core.registry()->find("i:5") == nullptr);  // nothing is defined before the last chunk
  auto def = only<define_on_shards>(core.on_init(12, init_of(0, "i:5", {10, 100}, iota(200, 800), 800)));
  BOOST_TEST(test::same_bits(def.value, iota(1000)));
  BOOST_TEST(def.layout.dims == (std::vector<std::int64_t>{10, 100}));
  BOOST_TEST(only<answer_key>(core.defined(def.id)).t == 12u);
}

BOOST_AUTO_TEST_CASE(a_chunk_out_of_order_is_refused_and_the_init_starts_over) {
  auto core = running();
  only<answer_key>(core.on_init(10, init_of(0, "i:5", {1000}, iota(400), 0)));
  auto skipped = only<refuse>(core.on_init(11, init_of(0, "i:5", {1000}, iota(200, 800), 800)));
  BOOST_TEST((skipped.why.code == errc::malformed));
  BOOST_TEST(skipped.why.detail.find("element 800, where element 400 was next") != std::string::npos);
  // What was staged is gone: the next chunk must start at 0 again.
  BOOST_TEST(
      (only<refuse>(core.on_init(12, init_of(0, "i:5", {1000}, iota(400, 400), 400))).why.code == errc::malformed));
  only<answer_key>(core.on_init(13, init_of(0, "i:5", {1000}, iota(600), 0)));
  auto def = only<define_on_shards>(core.on_init(14, init_of(0, "i:5", {1000}, iota(400, 600), 600)));
  BOOST_TEST(test::same_bits(def.value, iota(1000)));
}

BOOST_AUTO_TEST_CASE(two_members_staging_one_key_the_first_to_finish_wins) {
  auto core = running();
  only<answer_key>(core.on_init(10, init_of(0, "s:e", {1000}, iota(500, 0), 0)));
  only<answer_key>(core.on_init(11, init_of(1, "s:e", {1000}, iota(500, 5000), 0)));
  auto def = only<define_on_shards>(core.on_init(12, init_of(1, "s:e", {1000}, iota(500, 5500), 500)));
  BOOST_TEST(test::same_bits(def.value, iota(1000, 5000)));
  // Member 0's next chunk waits for the definition and is answered with the layout.
  BOOST_TEST(core.on_init(13, init_of(0, "s:e", {1000}, iota(500, 500), 500)).empty());
  auto answers = all_of<answer_key>(core.defined(def.id));
  BOOST_REQUIRE_EQUAL(answers.size(), 2u);
  BOOST_TEST(!answers[1].layout.parts.empty());
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_drops_what_it_staged) {
  auto core = running(3);
  only<answer_key>(core.on_init(10, init_of(1, "s:e", {1000}, iota(500), 0)));
  core.on_member_down(1, std::nullopt, "killed", t0);
  only<answer_key>(core.on_init(11, init_of(2, "s:f", {1000}, iota(500), 0)));
  core.on_done(worker_done{2}, t0);
  // A late chunk (the shell refuses a dead member's messages first; the core holds nothing).
  BOOST_TEST(
      (only<refuse>(core.on_init(12, init_of(1, "s:e", {1000}, iota(500, 500), 500))).why.code == errc::malformed));
  BOOST_TEST(core.registry()->find("s:e") == nullptr);
}

BOOST_AUTO_TEST_CASE(bad_values_and_shapes_are_refused_naming_the_key) {
  auto core = running();
  const std::int64_t huge = std::int64_t{1} << 32;
  auto overflow = only<refuse>(core.on_init(10, init_of(0, "s:big", {huge, huge, huge}, iota(4))));
  BOOST_TEST((overflow.why.code == errc::bad_shape));
  BOOST_TEST(overflow.why.detail.find("\"big\"") != std::string::npos);
  BOOST_TEST((only<refuse>(core.on_init(11, init_of(0, "s:z", {0, 4}, iota(4)))).why.code == errc::bad_shape));
  BOOST_TEST((only<refuse>(core.on_init(12, init_of(0, "s:w", {4}, iota(5)))).why.code == errc::bad_shape));
  BOOST_TEST((only<refuse>(core.on_init(13, init_of(0, "s:w", {4}, iota(2), 3))).why.code == errc::bad_shape));
  BOOST_TEST((only<refuse>(core.on_init(14, init_of(0, "s:w", {4}, iota(2), -1))).why.code == errc::bad_shape));
  tensor nan = iota(4);
  nan.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST((only<refuse>(core.on_init(15, init_of(0, "s:w", {4}, nan))).why.code == errc::not_finite));
  BOOST_TEST(core.registry()->size() == 0u);
  auto missing = only<refuse>(core.on_lookup(16, kv_lookup{0, "s:nope"}));
  BOOST_TEST((missing.why.code == errc::no_such_key));
}

BOOST_AUTO_TEST_CASE(a_barrier_waits_for_the_live_members_only) {
  auto core = running(3);
  BOOST_TEST(core.on_barrier(20, 0).empty());
  BOOST_TEST(core.on_barrier(21, 1).empty());
  auto out = core.on_member_down(2, std::nullopt, "killed", t0);
  BOOST_TEST(only<release>(out).tickets == (std::vector<ticket>{20, 21}));
  BOOST_TEST(only<remove_from_shards>(out).rank == 2u);
}

BOOST_AUTO_TEST_CASE(the_job_ends_when_every_member_has_left) {
  auto core = running(2);
  BOOST_TEST(all_of<finish>(core.on_done(worker_done{0}, t0)).empty());
  auto end = only<finish>(core.on_done(worker_done{1}, t0));
  BOOST_TEST(std::holds_alternative<job_result>(end.outcome));
  BOOST_TEST((core.phase() == job_phase::finished));
}

BOOST_AUTO_TEST_CASE(with_min_workers_the_job_shrinks_to_it_and_ends_below_it) {
  auto job = kv_job(4, 1);
  job.min_workers = 3;
  job_core core = make(job);
  ticket t = 1;
  only<welcome_shard>(core.on_shard_join(t++, shard_join{"job-kv", "h", 1, ""}, t0));
  for (std::uint32_t w = 0; w < 4; ++w) core.on_member_join(t++, worker_join{"job-kv", "h", 2, "", "", -1}, t0);
  core.shards_started(t0);
  BOOST_REQUIRE(core.phase() == job_phase::training);
  // One finished of its own accord (it still counts: it left when its loop ended), one
  // lost: three are left, and the job goes on without the lost one.
  BOOST_TEST(all_of<finish>(core.on_done(worker_done{0}, t0)).empty());
  auto out = core.on_member_down(1, std::nullopt, "killed", t0);
  BOOST_TEST(only<remove_from_shards>(out).rank == 1u);
  BOOST_TEST(all_of<finish>(out).empty());
  // A second loss leaves two, below --min-workers: a node loss, which launch restarts.
  auto end = only<finish>(core.on_member_down(2, std::nullopt, "killed", t0));
  const auto* f = std::get_if<fault>(&end.outcome);
  BOOST_REQUIRE(f != nullptr);
  BOOST_TEST((f->code == errc::all_workers_lost));
  BOOST_TEST(f->detail.find("2 left, fewer than --min-workers 3") != std::string::npos, f->detail);
}

BOOST_AUTO_TEST_CASE(members_get_the_ranks_they_ask_for_before_the_start) {
  job_core core = make(kv_job(3, 1));
  only<welcome_shard>(core.on_shard_join(1, shard_join{"job-kv", "h", 1, ""}, t0));
  auto join = [&](ticket t, std::int32_t wanted) {
    return core.on_member_join(t, worker_join{"job-kv", "h", 2, "", "", wanted}, t0);
  };
  BOOST_TEST(only<assign_rank>(join(10, 2)).rank == 2u);  // launched worker 2 joins first
  BOOST_TEST(only<assign_rank>(join(11, 2)).rank == 0u);  // 2 is taken: the lowest free rank
  auto last = join(12, 9);                                // beyond the job's workers: the lowest free
  BOOST_TEST(only<assign_rank>(last).rank == 1u);
  BOOST_TEST(only<start_shards>(last).members.workers == (std::vector<std::uint32_t>{0, 1, 2}));
  std::map<ticket, std::uint32_t> welcomed;
  for (const auto& w : all_of<welcome_member>(core.shards_started(t0))) {
    welcomed[w.t] = w.assignment.rank;
    BOOST_TEST(w.assignment.world == 3u);
  }
  BOOST_TEST(welcomed == (std::map<ticket, std::uint32_t>{{10, 2}, {11, 0}, {12, 1}}));
  // After the start a join gets a new rank whatever it asks for: ranks are never reused.
  auto late = join(13, 0);
  BOOST_TEST(only<assign_rank>(late).rank == 3u);
  BOOST_TEST(only<add_to_shards>(late).rank == 3u);
}

BOOST_AUTO_TEST_CASE(a_member_that_joins_while_the_shards_start_is_admitted_to_them) {
  job_core core = make(kv_job(1, 1));
  only<welcome_shard>(core.on_shard_join(1, shard_join{"job-kv", "h", 1, ""}, t0));
  only<start_shards>(core.on_member_join(10, worker_join{"job-kv", "h", 2, "", "", 0}, t0));
  auto early = core.on_member_join(11, worker_join{"job-kv", "h", 2, "", "", -1}, t0);
  BOOST_TEST(only<assign_rank>(early).rank == 1u);
  BOOST_TEST(all_of<welcome_member>(early).empty());
  auto started = core.shards_started(t0);
  BOOST_TEST(only<welcome_member>(started).t == 10u);
  BOOST_TEST(only<add_to_shards>(started).rank == 1u);  // the shards' start named rank 0 only
  auto added = core.member_added(1, t0);
  BOOST_TEST(only<welcome_member>(added).t == 11u);
  BOOST_TEST(only<welcome_member>(added).assignment.rank == 1u);
}

namespace {

// A running job of 2 members and 2 shards with checkpoints, and key "w" split over both.
job_core with_a_key_on_both_shards() {
  auto job = kv_job(2, 2);
  job.checkpoints.dir = "ck";
  job.checkpoints.every = 5;
  job_core core = running(job);
  const auto define = only<define_on_shards>(core.on_init(30, init_of(0, "s:w", {2000}, iota(2000))));
  BOOST_REQUIRE_EQUAL(define.layout.parts.size(), 2u);
  BOOST_REQUIRE(define.layout.parts[0].shard != define.layout.parts[1].shard);
  only<answer_key>(core.defined(define.id));
  return core;
}

// Checkpoint 10 in ck, holding `keys`.
resume_point checkpoint_10(const job_core& core, bool with_the_key = true) {
  resume_point r;
  r.step = r.clock = 10;
  r.shards = shard_resume{"ck/ckpt-000000000010", {"kv-shard-0.tf", "kv-shard-1.tf"}, 10};
  if (with_the_key) r.keys = core.registry()->keys();
  return r;
}

fault failure_of(const job_actions_list& out) {
  const auto end = only<finish>(out);
  BOOST_REQUIRE(std::holds_alternative<fault>(end.outcome));
  return std::get<fault>(end.outcome);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_lost_shard_is_replaced_from_the_newest_checkpoint_while_the_members_go_on) {
  auto core = with_a_key_on_both_shards();
  auto lost = core.on_shard_down(1, "killed");
  BOOST_TEST(all_of<finish>(lost).empty());
  BOOST_TEST(only<find_shard_checkpoint>(lost).shard == 1u);
  BOOST_TEST(only<note>(lost).text.find("the job goes on") != std::string::npos);
  // A member joining meanwhile waits: the new shard must admit it too.
  BOOST_TEST(core.on_member_join(40, worker_join{"job-kv", "h", 2, "", "", -1}, t0).empty());
  BOOST_TEST(core.replacement_checkpoint(checkpoint_10(core)).empty());  // no server yet
  auto joined = core.on_shard_join(41, shard_join{"job-kv", "h2", 7, ""}, t0);
  const auto& welcome = only<welcome_shard>(joined);
  BOOST_TEST(welcome.t == 41u);
  BOOST_TEST(welcome.welcome.index == 1u);  // the lost one's place
  BOOST_TEST(welcome.welcome.resume.dir == "ck/ckpt-000000000010");
  BOOST_TEST(only<start_shard>(joined).members.workers == (std::vector<std::uint32_t>{0, 1}));
  // One replacement only.
  BOOST_TEST((only<refuse>(core.on_shard_join(42, shard_join{"job-kv", "h3", 8, ""}, t0)).why.code ==
              errc::cluster_full));
  auto back = core.shard_replaced(1, t0);
  const auto& told = only<announce_shard>(back);
  BOOST_TEST(told.host == "h2");
  BOOST_TEST(told.port == 7u);
  BOOST_TEST(told.step == 10);
  BOOST_TEST(told.to == (std::vector<std::uint32_t>{0, 1}));
  BOOST_TEST(only<assign_rank>(back).rank == 2u);  // the held join, admitted now
  BOOST_TEST(only<add_to_shards>(back).rank == 2u);
  // Later members reach the shard at its new address, and the result counts the replacement.
  const auto& welcomed = only<welcome_member>(core.member_added(2, t0));
  BOOST_TEST(welcomed.assignment.shard_hosts == (std::vector<std::string>{"h", "h2"}));
  core.on_done(worker_done{0}, t0);
  core.on_done(worker_done{1}, t0);
  const auto& end = only<finish>(core.on_done(worker_done{2}, t0));
  BOOST_REQUIRE(std::holds_alternative<job_result>(end.outcome));
  BOOST_TEST(std::get<job_result>(end.outcome).restarts_in_place == 1);
}

BOOST_AUTO_TEST_CASE(a_lost_shard_whose_keys_the_checkpoint_lacks_ends_the_job_saying_why) {
  {  // defined after the newest checkpoint
    auto core = with_a_key_on_both_shards();
    core.on_shard_down(0, "killed");
    const fault f = failure_of(core.replacement_checkpoint(checkpoint_10(core, false)));
    BOOST_TEST((f.code == errc::shard_lost));
    BOOST_TEST(f.detail.find("key \"w\", which was defined after checkpoint 10") != std::string::npos, f.detail);
  }
  {  // no checkpoint at all
    auto core = with_a_key_on_both_shards();
    core.on_shard_down(0, "killed");
    const fault f = failure_of(core.replacement_checkpoint(failure{"no complete checkpoint in ck"}));
    BOOST_TEST(f.detail.find("cannot be restored: no complete checkpoint in ck") != std::string::npos, f.detail);
  }
}

BOOST_AUTO_TEST_CASE(a_lost_shard_ends_the_job_when_nothing_takes_its_place_or_another_is_lost) {
  {
    auto core = with_a_key_on_both_shards();
    core.on_shard_down(1, "killed");
    core.replacement_checkpoint(checkpoint_10(core));
    const auto overdue = t0 + std::chrono::milliseconds(core.job().stall_timeout_ms) + std::chrono::seconds(1);
    BOOST_TEST(all_of<finish>(core.on_tick(t0 + std::chrono::seconds(1))).empty());
    const fault f = failure_of(core.on_tick(overdue));
    BOOST_TEST(f.detail.find("no shard server joined in its place within --stall-timeout") != std::string::npos,
               f.detail);
  }
  {
    auto core = with_a_key_on_both_shards();
    core.on_shard_down(1, "killed");
    const fault f = failure_of(core.on_shard_down(0, "killed"));
    BOOST_TEST(f.detail.find("while shard 1 was being replaced") != std::string::npos, f.detail);
  }
  {  // without checkpoints there is nothing to restore from
    auto core = running();
    BOOST_TEST((failure_of(core.on_shard_down(1, "killed")).code == errc::shard_lost));
  }
}

BOOST_AUTO_TEST_CASE(a_straggler_is_named_again_to_the_replacement_shard) {
  auto job = kv_job(3, 2);
  job.mode = sync_mode::ssp;
  job.checkpoints.dir = "ck";
  job.checkpoints.every = 5;
  auto core = running(job);
  std::vector<name_straggler> named;
  for (std::int64_t clock = 1; clock <= 4; ++clock)
    for (std::uint32_t r = 0; r < 3; ++r) {
      step_report s;
      s.rank = r;
      s.clock = clock;
      s.busy_seconds = r == 2 ? 0.04 : 0.01;  // four times the others
      for (const auto& n : all_of<name_straggler>(core.on_step(s, t0))) named.push_back(n);
    }
  BOOST_REQUIRE_EQUAL(named.size(), 1u);
  core.on_shard_down(1, "killed");
  core.replacement_checkpoint(checkpoint_10(core));
  only<start_shard>(core.on_shard_join(50, shard_join{"job-kv", "h2", 7, ""}, t0));
  const auto again = only<name_straggler>(core.shard_replaced(1, t0));
  BOOST_TEST(again.rank == 2u);
  BOOST_TEST(again.slow);
}
