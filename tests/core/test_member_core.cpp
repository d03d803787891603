// Tests for core/member_core.cpp, member_step.cpp, member_pulls.cpp and
// member_update.cpp, stepped without actors or threads (tests/support/member_bench.hpp
// runs the members against a real
// shard_core): one microbatch through two stages, or two stages applying the optimizer
// themselves, is bitwise train-local; each schedule stores what it promises; a
// replacement resumes at its clock; a stranger's activation is dropped with a warning; a
// malformed one from the neighbour, a lost neighbour (but one that owes nothing more in
// the job's last step is only warned about), a failed pull, a diverging loss, an
// op that throws and data that does not match the job stop the member with their typed
// errors; a refused push is counted and training goes on; simulated compute needs no data;
// gradient buckets leave during backward and change no bit, and a piece that was not
// asked for stops the member.
#define BOOST_TEST_MODULE member_core
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "tensor/trainer.hpp"
#include "tests/support/member_bench.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::same_bits;
using test::member_bench;
using test::synthetic;

namespace {

job_spec pipeline(std::uint32_t stages, std::int32_t microbatches, std::uint32_t servers = 1) {
  job_spec j;
  j.job_id = "member-under-test";
  j.mode = sync_mode::sync;
  j.workers = 1;
  j.servers = servers;
  j.pipeline_stages = stages;
  j.microbatches = microbatches;
  j.train.epochs = 2;
  j.train.batch_size = 40;
  return j;
}

std::string stop_of(const member_actions_list& actions) {
  for (const auto& a : actions)
    if (auto* s = std::get_if<member_actions::stop>(&a)) return to_string(s->why);
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_microbatch_through_two_stages_is_bitwise_train_local) {
  auto data = synthetic(400);
  for (std::int64_t bucket_bytes : {std::int64_t{0}, std::int64_t{1}})  // without and with gradient buckets
    BOOST_TEST_CONTEXT("--bucket-bytes " << bucket_bytes) {
      job_spec job = pipeline(2, 1);
      job.bucket_bytes = bucket_bytes;
      member_bench bench(job, data);
      bench.start();
      bench.run();
      BOOST_REQUIRE(bench.stopped.empty());
      BOOST_REQUIRE_EQUAL(bench.done.size(), 2u);
      BOOST_TEST(bench.done[0].clock == 20);  // 2 epochs of 400 / 40 steps
      auto local = train_local(bench.job.train, *data);
      BOOST_REQUIRE(local.has_value());
      BOOST_TEST(same_bits(bench.params(), local->params));
      BOOST_TEST(bench.epochs.size() == 4u);  // each stage reports each epoch
      for (std::uint32_t r = 0; r < 2; ++r) BOOST_TEST((bench.members[r]->phase() == member_phase::stopped));
      if (bucket_bytes == 1)  // the stages pulled in pieces
        BOOST_TEST(std::any_of(bench.pulls.begin(), bench.pulls.end(), [](auto& p) { return p.piece_numel > 0; }));
    }
}

BOOST_AUTO_TEST_CASE(stages_that_apply_the_optimizer_themselves_are_bitwise_train_local) {
  auto data = synthetic(400);
  member_bench bench(pipeline(2, 1, 0), data);
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.pulls.empty());  // nothing to pull: every step starts from the mailbox
  tensor full({bench.m.num_params()});
  const auto spans = job_stage_spans(bench.job, bench.m);
  for (const auto& e : bench.epochs)
    if (e.epoch == 1) copy(full.view().flat(spans[e.rank].param_offset, spans[e.rank].numel), e.params);
  auto local = train_local(bench.job.train, *data);
  BOOST_TEST(same_bits(full, local->params));
}

BOOST_AUTO_TEST_CASE(each_schedule_stores_what_it_promises) {
  for (auto schedule : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b}) {
    job_spec job = pipeline(2, 4);
    job.schedule = schedule;
    job.train.epochs = 1;
    member_bench bench(job, synthetic(200));
    bench.start();
    bench.run();
    BOOST_REQUIRE(bench.stopped.empty());
    const std::vector<std::int32_t> peaks{bench.done[0].peak_stored, bench.done[1].peak_stored};
    const std::vector<std::int32_t> want =
        schedule == pipeline_schedule::gpipe ? std::vector<std::int32_t>{4, 4} : std::vector<std::int32_t>{2, 1};
    BOOST_TEST(peaks == want, boost::test_tools::per_element());
  }
}

// Note [Stage tensors leave at once]: under GPipe stage 0 runs four forwards back to
// back, and each activation goes out before the next forward runs.
BOOST_AUTO_TEST_CASE(each_stage_tensor_leaves_before_the_next_action_runs) {
  job_spec job = pipeline(2, 4);
  job.schedule = pipeline_schedule::gpipe;
  member_bench bench(job, synthetic(200));
  member_core& stage0 = *bench.members[0];
  stage0.on_welcome(bench.assignment(0));
  BOOST_REQUIRE_EQUAL(stage0.on_wired().size(), 1u);  // its pull
  auto actions = stage0.on_params(0, params_reply{0, 0, bench.shard->pack_slice(0, bench.shard->params()), {}});
  for (int mb = 0; mb < 4; ++mb) {
    BOOST_TEST_CONTEXT("after forward " << mb) {
      BOOST_REQUIRE_EQUAL(actions.size(), 2u);
      BOOST_TEST(std::get<member_actions::send_activation>(actions.front()).a.microbatch == mb);
      BOOST_TEST(std::holds_alternative<member_actions::resume>(actions.back()));
    }
    actions = stage0.on_resume();
  }
  BOOST_TEST(actions.empty());  // the backwards wait for stage 1's gradients
}

// Note [Gradient buckets]: a step pulls one piece per bucket, the lowest layers' first,
// and forward waits only for the layers it has reached; the last backward pushes each
// bucket's piece and pauses before the layers below, the highest piece first; the job's
// bits are those without buckets, whatever order the pieces arrive in.
BOOST_AUTO_TEST_CASE(gradient_buckets_travel_while_forward_and_backward_run_and_change_no_bit) {
  auto data = synthetic(400);
  job_spec job = pipeline(1, 1);
  job.workers = 2;
  job.bucket_bytes = 1;  // a bucket per layer with parameters
  member_bench probe(job, data);
  member_core& w = *probe.members[0];
  w.on_welcome(probe.assignment(0));
  const auto pulls = w.on_wired();
  BOOST_REQUIRE_EQUAL(pulls.size(), 3u);  // the MLP's three layers with parameters
  std::int64_t pulled = 0;
  member_actions_list actions;
  for (std::size_t i = 0; i < pulls.size(); ++i) {
    const auto& q = std::get<member_actions::pull>(pulls[i]).request;
    BOOST_TEST(q.piece_offset == pulled);  // the lowest layers' piece first
    pulled += q.piece_numel;
    actions = w.on_params(0, probe.answer(0, q));
    if (i + 1 < pulls.size()) BOOST_TEST(actions.empty());  // forward waits for the next layer's parameters
  }
  BOOST_TEST(pulled == probe.m.num_params());
  std::vector<std::int64_t> offsets;
  std::int64_t covered = 0;
  for (int pause = 0; pause < 10 && !actions.empty() && std::holds_alternative<member_actions::resume>(actions.back());
       ++pause) {
    BOOST_REQUIRE_EQUAL(actions.size(), 2u);  // one piece, then the pause
    const auto& p = std::get<member_actions::push>(actions.front()).grads;
    BOOST_TEST(p.piece_numel > 0);
    offsets.push_back(p.piece_offset);
    covered += p.piece_numel;
    actions = w.on_resume();
  }
  BOOST_REQUIRE(!actions.empty());
  const auto& last = std::get<member_actions::push>(actions.front()).grads;
  BOOST_TEST(last.piece_offset == 0);  // layer 0's piece, the last computed
  covered += last.piece_numel;
  BOOST_TEST(covered == probe.m.num_params());
  BOOST_TEST(offsets.size() == 2u);  // the MLP's three layers with parameters: two pauses
  BOOST_TEST(std::is_sorted(offsets.rbegin(), offsets.rend()));  // the highest piece first

  tensor with_buckets;
  for (auto [bytes, reversed] : {std::pair{1, false}, std::pair{0, false}, std::pair{1, true}}) {
    job.bucket_bytes = bytes;
    member_bench bench(job, data);
    bench.reverse_pieces = reversed;  // the top layers' parameters arrive first
    bench.start();
    bench.run();
    BOOST_REQUIRE(bench.stopped.empty());
    BOOST_TEST(bench.shard->counters().rejected == 0);
    BOOST_TEST(bench.shard->version() == 10);  // 2 epochs of 400 / (2 x 40)
    if (with_buckets.empty())
      with_buckets = bench.params();
    else
      BOOST_TEST(same_bits(bench.params(), with_buckets));
  }
}

BOOST_AUTO_TEST_CASE(a_piece_that_was_not_asked_for_stops_the_member) {
  job_spec job = pipeline(1, 1);
  job.bucket_bytes = 1;
  member_bench bench(job, synthetic(400));
  member_core& w = *bench.members[0];
  w.on_welcome(bench.assignment(0));
  const auto pulls = w.on_wired();
  BOOST_REQUIRE(!pulls.empty());
  pull_request q = std::get<member_actions::pull>(pulls.front()).request;
  q.piece_offset += 1;  // a piece one float off the one asked for
  const auto out = w.on_params(0, bench.answer(0, q));
  BOOST_TEST(stop_of(out).find("bad_shape: shard 0 answered with the piece [1, +") == 0u, stop_of(out));
  BOOST_TEST(stop_of(out).find("run the same troupe build") != std::string::npos);
  BOOST_TEST((w.phase() == member_phase::stopped));
}

BOOST_AUTO_TEST_CASE(an_answer_of_the_wrong_size_or_without_values_stops_the_member) {
  for (const bool without_values : {false, true}) {
    BOOST_TEST_CONTEXT((without_values ? "without values" : "one value short")) {
      member_bench bench(pipeline(1, 1), synthetic(400));
      member_core& w = *bench.members[0];
      w.on_welcome(bench.assignment(0));
      const auto pulls = w.on_wired();
      BOOST_REQUIRE(!pulls.empty());
      params_reply r = bench.answer(0, std::get<member_actions::pull>(pulls.front()).request);
      const std::int64_t n = r.params.numel();
      r.params = without_values ? tensor() : tensor({n - 1});
      const auto out = w.on_params(0, r);
      const std::string want = "bad_shape: shard 0 answered with " + std::to_string(without_values ? 0 : n - 1) +
                               " f32 parameters, expected " + std::to_string(n) + " f32";
      BOOST_TEST(stop_of(out).find(want) == 0u, stop_of(out));
      BOOST_TEST(stop_of(out).find("run the same troupe build") != std::string::npos);
      BOOST_TEST((w.phase() == member_phase::stopped));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_replacement_resumes_at_its_clock) {
  job_spec job = pipeline(1, 1);
  job.mode = sync_mode::async;  // alone in sync, it would wait for rounds nobody closes
  job.train.epochs = 3;
  member_bench bench(job, synthetic(400));
  bench.start(12);  // 10 steps per epoch: in epoch 1, step 2
  BOOST_REQUIRE(!bench.pulls.empty());
  BOOST_TEST(bench.pulls.front().clock == 12);
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.steps.front().epoch == 1);
  BOOST_TEST(bench.epochs.size() == 2u);  // epochs 1 and 2
  BOOST_TEST(bench.epochs.front().samples == 8 * 40);  // the rest of epoch 1
  BOOST_TEST(bench.done[0].clock == 30);
}

BOOST_AUTO_TEST_CASE(a_strangers_activation_is_dropped_with_a_warning) {
  member_bench bench(pipeline(2, 2), synthetic(200));
  bench.start();
  const auto dropped = bench.members[1]->on_activation(activation{0, 0, 0, 0, tensor({3, 3})}, false, "a stranger");
  BOOST_TEST(stop_of(dropped).empty());
  BOOST_REQUIRE_EQUAL(dropped.size(), 1u);
  const auto& w = std::get<member_actions::warn>(dropped.front());
  BOOST_TEST(w.text == "stage 1 of replica 0: dropped an activation from a stranger claiming stage 0 of replica 0: "
                       "not this stage's neighbour");
  // A neighbour's message that claims another replica is a stranger's too.
  BOOST_TEST(stop_of(bench.members[1]->on_activation(activation{3, 0, 0, 0, tensor({3, 3})}, true, "x")).empty());
  bench.run();
  BOOST_TEST(bench.stopped.empty());
  BOOST_TEST(bench.done.size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_malformed_activation_from_the_neighbour_stops_the_stage) {
  member_bench bench(pipeline(2, 2), synthetic(200));
  bench.start();
  const auto wrong_shape = bench.members[1]->on_activation(activation{0, 0, 0, 0, tensor({3, 3})}, true, "stage 0");
  BOOST_TEST(stop_of(wrong_shape) == "bad_shape: stage 1 of replica 0 got an activation for microbatch 0 of step 0 "
                                     "of f32(3, 3), expected f32(20, 256) from stage 0",
             stop_of(wrong_shape));
  BOOST_TEST((bench.members[1]->phase() == member_phase::stopped));
  member_bench late(pipeline(2, 2), synthetic(200));
  late.start();
  const auto future = late.members[1]->on_activation_grad(activation_grad{0, 2, 5, 0, tensor({1})}, true, "stage 2");
  BOOST_TEST(stop_of(future).empty());  // stage 1 is the last: any gradient sent to it is a stranger's
  const auto stale = late.members[0]->on_activation_grad(activation_grad{0, 1, 7, 0, tensor({1})}, true, "stage 1");
  BOOST_TEST(stop_of(stale).find("bad_clock") == 0u, stop_of(stale));
}

BOOST_AUTO_TEST_CASE(a_lost_neighbour_and_a_failed_pull_stop_the_member) {
  member_bench bench(pipeline(2, 2), synthetic(200));
  bench.start();
  BOOST_TEST(stop_of(bench.members[0]->on_neighbour_down(false, "remote_link_unreachable")) ==
             "stage_lost: stage 1 of replica 0 is gone (remote_link_unreachable); stage 0 of replica 0 stops, since "
             "its pipeline cannot finish a step without it");
  BOOST_TEST(stop_of(bench.members[1]->on_pull_failed(0, "request_timeout")) ==
             "stalled: pull from shard 0 at clock 0 failed: request_timeout");
  BOOST_TEST(bench.members[1]->on_params(0, params_reply{}).empty());  // a stopped member takes nothing
}

// Note [A pipeline neighbour gone in the last step]. Stage 1 finishes first: stage 0's
// last backward waits for its gradient, and stage 0 then waits only for its own push's
// answer.
BOOST_AUTO_TEST_CASE(a_neighbour_that_owes_nothing_more_in_the_last_step_is_only_warned_about) {
  member_bench whole(pipeline(2, 2), synthetic(200));
  whole.start();
  whole.run();
  BOOST_REQUIRE(whole.done.size() == 2u);
  const std::int64_t last_clock = 2 * 5 - 1;  // 2 epochs of 200 samples in batches of 40

  member_bench bench(pipeline(2, 2), synthetic(200));
  bench.start();
  while (!bench.done.contains(1) && !bench.queue.empty()) bench.run(1);
  BOOST_REQUIRE(bench.done.contains(1));
  BOOST_REQUIRE(!bench.done.contains(0));
  // Stage 1 leaves and its connection closes first: stage 0 has every gradient it needs.
  const auto gone = bench.members[0]->on_neighbour_down(false, "remote_link_unreachable");
  BOOST_TEST(stop_of(gone).empty(), stop_of(gone));
  BOOST_REQUIRE(gone.size() == 1u);
  const auto* w = std::get_if<member_actions::warn>(&gone.front());
  BOOST_REQUIRE(w != nullptr);
  BOOST_TEST(w->text == "stage 1 of replica 0 is gone (remote_link_unreachable) during the job's last step; stage 0 "
                        "of replica 0 needs nothing more from it and finishes",
             w->text);
  bench.run();
  BOOST_TEST(bench.done.contains(0));
  BOOST_TEST(bench.stopped.empty());
  BOOST_TEST(same_bits(bench.params(), whole.params()));  // it finished as if nothing had happened
  // A finished stage needs nothing from its previous one either.
  BOOST_TEST(stop_of(bench.members[1]->on_neighbour_down(true, "remote_link_unreachable")).empty());

  // In the last step, before its parameters came (so before any of its backwards had
  // their gradients), the next stage still owes stage 0 everything: it stops.
  member_bench early(pipeline(2, 2), synthetic(200));
  early.start();
  const auto asked_last = [&] {
    return std::any_of(early.pulls.begin(), early.pulls.end(),
                       [&](const pull_request& q) { return q.worker == 0 && q.clock == last_clock; });
  };
  while (!asked_last() && !early.queue.empty()) early.run(1);
  BOOST_REQUIRE(asked_last());
  BOOST_TEST(stop_of(early.members[0]->on_neighbour_down(false, "remote_link_unreachable")).find("stage_lost") == 0u);
  BOOST_TEST((early.members[0]->phase() == member_phase::stopped));

  // In the last step, its forwards run and its backwards still waiting for their
  // gradients (stage 1 has had none of this step's activations yet): it stops too.
  member_bench waiting(pipeline(2, 2), synthetic(200));
  waiting.start();
  const auto began_last = [&] {
    return std::any_of(waiting.pulls.begin(), waiting.pulls.end(),
                       [&](const pull_request& q) { return q.worker == 0 && q.clock == last_clock; }) &&
           waiting.members[0]->in_step();
  };
  while (!began_last() && !waiting.queue.empty()) waiting.run(1);
  BOOST_REQUIRE(began_last());
  BOOST_TEST(stop_of(waiting.members[0]->on_neighbour_down(false, "remote_link_unreachable")).find("stage_lost") ==
             0u);
}

BOOST_AUTO_TEST_CASE(a_diverging_loss_stops_with_diverged) {
  job_spec job = pipeline(1, 1);
  job.train.lr = 1e6f;
  job.train.warmup_epochs = 0.f;
  member_bench bench(job, synthetic(400));
  bench.start();
  bench.run();
  BOOST_REQUIRE_EQUAL(bench.stopped.size(), 1u);
  BOOST_TEST((bench.stopped[0].code == errc::diverged));
  BOOST_TEST(bench.stopped[0].detail.find("lower --lr") != std::string::npos, bench.stopped[0].detail);
}

// Images of 1x14x14 where the job says 1x28x28: the first layer's check throws, and the
// member stops with compute_failed naming what it was doing instead of crashing.
BOOST_AUTO_TEST_CASE(an_op_that_throws_stops_with_compute_failed) {
  auto data = synthetic(200);
  auto small = std::make_shared<dataset_split>(*data);
  small->train.images = tensor({200, 1, 14, 14});
  member_setup setup;
  setup.data = [small](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> {
    return std::shared_ptr<const dataset_split>(small);
  };
  member_bench bench(pipeline(1, 1), data, setup);
  bench.start();
  bench.run();
  BOOST_REQUIRE_EQUAL(bench.stopped.size(), 1u);
  BOOST_TEST((bench.stopped[0].code == errc::compute_failed));
  BOOST_TEST(bench.stopped[0].detail.find("worker 0: forward of microbatch 0 failed: ") == 0u,
             bench.stopped[0].detail);
}

BOOST_AUTO_TEST_CASE(data_that_does_not_match_the_job_stops_at_the_welcome) {
  member_setup setup;
  setup.data = [](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> { return synthetic(150); };
  member_bench bench(pipeline(1, 1), synthetic(200), setup);
  const auto out = bench.members[0]->on_welcome(bench.assignment(0));
  BOOST_TEST(stop_of(out) == "bad_job: worker 0's training set has 150 samples but the job has 200");
  BOOST_TEST(bench.members[0]->on_wired().empty());
}

// bf16 products are computed by the host: a member asked for them on a device stops at
// its welcome, before it opens the device, saying what to change.
BOOST_AUTO_TEST_CASE(bf16_products_on_a_device_stop_at_the_welcome) {
  member_setup setup;
  setup.compute.where = device{device_kind::cuda, 0};
  setup.compute.products = precision::bf16;
  member_bench bench(pipeline(1, 1), synthetic(200), setup);
  const auto out = bench.members[0]->on_welcome(bench.assignment(0));
  BOOST_TEST(stop_of(out) ==
             "bad_job: worker 0: --precision bf16 computes on the CPU only, and this member computes on cuda:0; drop "
             "--precision there, or use --tf32 for faster products on CUDA");
}

// On the CPU the same job trains to the end, to parameters near fp32's: after 20 steps
// the largest difference is 0.011 here and the largest parameter 0.37.
BOOST_AUTO_TEST_CASE(bf16_products_on_the_cpu_train_to_nearby_parameters) {
  std::vector<tensor> params;
  for (precision p : {precision::fp32, precision::bf16}) {
    member_setup setup;
    setup.compute.products = p;
    member_bench bench(pipeline(1, 1), synthetic(400), setup);
    bench.start();
    bench.run();
    BOOST_REQUIRE(bench.stopped.empty());
    BOOST_REQUIRE_EQUAL(bench.done.size(), 1u);
    params.push_back(bench.params());
  }
  BOOST_TEST(!same_bits(params[0], params[1]));
  const float diff = test::max_abs_diff(params[0], params[1]);
  BOOST_TEST_MESSAGE("largest parameter difference, bf16 against fp32: " << diff);
  BOOST_TEST(diff < 0.05f);
  float largest = 0.f;
  for (std::int64_t i = 0; i < params[0].numel(); ++i)
    largest = std::max(largest, std::abs(params[0].data<float>()[i]));
  BOOST_TEST_MESSAGE("largest fp32 parameter: " << largest);
  BOOST_TEST(diff < 0.25f * largest);
}

BOOST_AUTO_TEST_CASE(a_refused_push_is_counted_and_training_goes_on) {
  job_spec job = pipeline(1, 1);
  job.train.epochs = 1;
  member_bench bench(job, synthetic(200));
  bench.poison_pushes = 1;
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.done[0].rejected == 1);
  BOOST_REQUIRE(!bench.warnings.empty());
  BOOST_TEST(bench.warnings[0].find("shard 0 refused the gradient of clock 0: not_finite") != std::string::npos,
             bench.warnings[0]);
}

BOOST_AUTO_TEST_CASE(simulated_compute_pushes_a_synthetic_gradient_without_data) {
  job_spec job = pipeline(2, 2);
  job.simulate_compute_ms = 0.01;
  job.train.epochs = 1;
  member_setup setup;
  setup.data = [](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> {
    return failure{"simulated compute must not read data"};
  };
  member_bench bench(job, synthetic(200), setup);
  const tensor before = bench.params();
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.done.size() == 2u);
  BOOST_TEST(!same_bits(bench.params(), before));  // the shard applied the synthetic gradients
}

// Note [Backup workers]: three sync workers, one backup, worker 2 slow: rounds close
// without it, its late gradients are dropped, and it skips to the open round, reporting
// every epoch once and the dropped samples.
BOOST_AUTO_TEST_CASE(a_late_worker_skips_to_the_open_round_and_reports_what_was_dropped) {
  job_spec job = pipeline(1, 1);
  job.workers = 3;
  job.backup_workers = 1;
  job.train.epochs = 3;
  job.train.batch_size = 10;  // 80 samples each: 8 steps per epoch, 24 in all
  member_bench bench(job, synthetic(240));
  bench.slow_member = 2;
  bench.slow_requeues = 6;  // about six rounds of the others per step of its own
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_REQUIRE(bench.done.size() == 3u);
  for (const auto& [rank, d] : bench.done) BOOST_TEST(d.clock == 24);
  std::map<std::uint32_t, std::vector<std::int32_t>> epochs;
  for (const auto& e : bench.epochs) epochs[e.rank].push_back(e.epoch);
  for (std::uint32_t r = 0; r < 3; ++r) BOOST_TEST(epochs[r] == (std::vector<std::int32_t>{0, 1, 2}));
  std::map<std::uint32_t, std::int64_t> computed;
  std::int64_t dropped = 0, skipped = 0, previous = 0;
  for (const auto& s : bench.steps) {
    dropped += s.samples_dropped;
    computed[s.rank] += s.samples;
    if (s.rank != 2) continue;
    skipped += s.clock - previous - 1;  // clocks between two of its reports were skipped
    previous = s.clock;
  }
  for (const auto& [rank, d] : bench.done) dropped += d.samples_dropped;
  const std::int64_t late = bench.shard->counters().late;
  BOOST_TEST(late > 0);
  BOOST_TEST(dropped == late * 10);  // one shard: every late gradient is a step's 10 samples
  BOOST_TEST(skipped > 0);           // it fell behind by more than a round and caught up
  BOOST_TEST(computed[0] == 240);
  BOOST_TEST(computed[1] == 240);
  BOOST_TEST(computed[2] < 240);     // the rounds it skipped were not computed
  BOOST_TEST(bench.shard->version() == 24);
}
