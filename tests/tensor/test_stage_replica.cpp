// Tests for tensor/stage_replica.cpp: one minibatch run through K stages and M
// microbatches, in the order each schedule gives every stage, produces the parameter
// gradients and loss of the unsplit model: bitwise with one microbatch (the same
// operations in the same order), and within a stated tolerance with several (the batch
// sums of the weight gradients are split into M partial sums). Slots are reused and
// bounded as the schedules say.
#define BOOST_TEST_MODULE stage_replica
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <map>

#include "actors/pipeline_schedule.hpp"
#include "tensor/random.hpp"
#include "tensor/stage_replica.hpp"
#include "tensor/trainer.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

model build(const char* spec) {
  auto s = parse_model_spec(spec);
  BOOST_REQUIRE(s.has_value());
  auto m = model::build(*s, shape{1, 28, 28}, 10);
  BOOST_REQUIRE(m.has_value());
  return *m;
}

struct minibatch {
  tensor x, y;
};

minibatch random_batch(std::int64_t b, std::uint64_t seed) {
  minibatch mb{test::random_tensor({b, 1, 28, 28}, seed), tensor({b}, dtype::i32)};
  rng r(seed + 1);
  for (std::int64_t i = 0; i < b; ++i) mb.y.data<std::int32_t>()[i] = static_cast<std::int32_t>(r.uniform(0.f, 9.99f));
  return mb;
}

struct pipeline_outcome {
  tensor grads;  // the stages' gradients, concatenated: the full model's layout
  double loss = 0.0;
  std::vector<int> peak;  // per stage
};

// Runs one minibatch through the stages of m cut at `cuts`, each stage following its
// action list; messages between stages are copies, as on the wire.
pipeline_outcome run_pipeline(const model& m, const std::vector<int>& cuts, int micro, pipeline_schedule sched,
                              const tensor& params, const minibatch& mb, const compute& c = host_compute()) {
  auto stages = m.cut(cuts);
  BOOST_REQUIRE(stages.has_value());
  const int k = static_cast<int>(stages->size());
  const std::int64_t b = mb.x.size(0);
  auto rows_of = [&](int i) { return b * (i + 1) / micro - b * i / micro; };
  auto first_row = [&](int i) { return b * i / micro; };
  std::vector<std::unique_ptr<stage_replica>> reps;
  std::vector<std::vector<pipeline_action>> lists;
  std::int64_t offset = 0;
  for (int i = 0; i < k; ++i) {
    lists.push_back(stage_actions(sched, k, i, micro));
    reps.push_back(std::make_unique<stage_replica>((*stages)[i], i == 0, i == k - 1, (b + micro - 1) / micro,
                                                   peak_stored(lists.back()), c));
    auto& p = reps.back()->params();
    copy(p, params.view().flat(offset, p.numel()));
    reps.back()->commit_params();
    offset += p.numel();
    reps.back()->zero_grads();
  }
  std::map<std::pair<int, int>, tensor> acts, grads;  // (stage, microbatch) -> message into that stage
  std::vector<std::map<int, int>> slot_of(k);
  std::vector<std::size_t> pos(k, 0);
  pipeline_outcome out;
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < k; ++i) {
      if (pos[i] == lists[i].size()) continue;
      const auto a = lists[i][pos[i]];
      const int j = a.microbatch;
      if (a.forward) {
        tensor in;
        if (i == 0) {
          in = tensor::uninitialized(shape{rows_of(j), 1, 28, 28});
          copy(in, mb.x.view().slice(first_row(j), first_row(j) + rows_of(j)));
        } else {
          auto it = acts.find({i, j});
          if (it == acts.end()) continue;
          in = std::move(it->second);
          acts.erase(it);
        }
        const int slot = reps[i]->forward(in);
        slot_of[i][j] = slot;
        if (i == k - 1) {
          out.loss += reps[i]->loss(slot, mb.y.view().slice(first_row(j), first_row(j) + rows_of(j)), 1.0f / static_cast<float>(b)) *
                      static_cast<double>(rows_of(j)) / static_cast<double>(b);
        } else {
          acts[{i + 1, j}] = reps[i]->output_on_host(slot);
        }
      } else {
        tensor g;
        if (i < k - 1) {
          auto it = grads.find({i, j});
          if (it == grads.end()) continue;
          g = std::move(it->second);
          grads.erase(it);
        }
        const_tensor_view gin = reps[i]->backward(slot_of[i][j], g.empty() ? const_tensor_view() : g.view());
        if (i > 0) {
          BOOST_REQUIRE(!gin.empty());
          tensor msg = tensor::uninitialized(gin.sizes());
          copy(msg, gin);
          grads[{i - 1, j}] = std::move(msg);
        } else {
          BOOST_TEST(gin.empty());
        }
      }
      ++pos[i];
      progress = true;
    }
  }
  for (int i = 0; i < k; ++i) BOOST_REQUIRE_EQUAL(pos[i], lists[i].size());
  out.grads = tensor({m.num_params()});
  offset = 0;
  for (int i = 0; i < k; ++i) {
    copy(out.grads.view().flat(offset, reps[i]->grads().numel()), reps[i]->fetch_grads());
    offset += reps[i]->grads().numel();
    out.peak.push_back(reps[i]->peak_stored());
    BOOST_TEST(reps[i]->stored() == 0);
  }
  return out;
}

struct reference {
  tensor params, grads;
  double loss = 0.0;
};

reference unsplit(const model& m, const minibatch& mb) {
  replica r(m, mb.x.size(0));
  m.init_params(r.params(), 7);
  reference out;
  out.loss = r.compute_gradients(mb.x, mb.y);
  out.params = r.params();  // a deep copy
  out.grads = r.grads();
  return out;
}

bool bitwise_equal(const_tensor_view a, const_tensor_view b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

// max |a - b| / (max |b| over the whole tensor).
double max_relative_difference(const_tensor_view a, const_tensor_view b) {
  double diff = 0.0, scale = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::fabs(double(b.data<float>()[i])));
  }
  return diff / scale;
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_microbatch_is_bitwise_the_unsplit_model) {
  for (const char* spec : {"mlp", "cnn"}) {
    const model m = build(spec);
    const minibatch mb = random_batch(24, 3);
    const reference ref = unsplit(m, mb);
    std::vector<std::vector<int>> cut_sets{{}, {2}, {1, 3}};
    if (m.num_layers() > 6) cut_sets.push_back({2, 5, 7});
    for (const auto& cuts : cut_sets)
      for (auto sched : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b})
        BOOST_TEST_CONTEXT(spec << " with " << cuts.size() + 1 << " stages, " << name_of(sched)) {
          const auto out = run_pipeline(m, cuts, 1, sched, ref.params, mb);
          BOOST_TEST(bitwise_equal(out.grads, ref.grads));
          BOOST_TEST(out.loss == ref.loss);
        }
  }
}

// Tolerance: splitting a batch of 24 into M partial sums changes only the float rounding
// of the weight-gradient reductions; 1e-5 of the largest gradient is ~100 ulps there.
BOOST_AUTO_TEST_CASE(microbatches_match_the_unsplit_model_within_rounding) {
  for (const char* spec : {"mlp", "cnn"}) {
    const model m = build(spec);
    const minibatch mb = random_batch(24, 5);
    const reference ref = unsplit(m, mb);
    for (int micro : {2, 3, 4, 8})
      for (auto sched : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b})
        BOOST_TEST_CONTEXT(spec << " K=3 M=" << micro << " " << name_of(sched)) {
          const auto out = run_pipeline(m, {1, 3}, micro, sched, ref.params, mb);
          BOOST_TEST(max_relative_difference(out.grads, ref.grads) < 1e-5);
          BOOST_TEST(std::fabs(out.loss - ref.loss) < 1e-5 * std::fabs(ref.loss));
          BOOST_TEST(!bitwise_equal(out.grads, ref.grads));  // the test sees real partial sums
        }
  }
}

BOOST_AUTO_TEST_CASE(slots_follow_the_schedule_and_are_bounded) {
  const model m = build("mlp");
  const minibatch mb = random_batch(32, 9);
  const reference ref = unsplit(m, mb);
  // mlp: flatten | fc1 | relu | fc2, relu, fc3 (a first stage without parameters, too).
  const auto gpipe = run_pipeline(m, {1, 2, 3}, 8, pipeline_schedule::gpipe, ref.params, mb);
  const auto ofob = run_pipeline(m, {1, 2, 3}, 8, pipeline_schedule::one_f_one_b, ref.params, mb);
  for (int i = 0; i < 4; ++i) {
    BOOST_TEST(gpipe.peak[i] == 8);
    BOOST_TEST(ofob.peak[i] == 4 - i);
  }
  stage_replica s(m, true, true, 4, 1);
  const tensor x = test::random_tensor({4, 1, 28, 28}, 1);
  s.forward(x);
  BOOST_CHECK_THROW(s.forward(x), contract_error);  // both slots would be needed
  const tensor big = test::random_tensor({5, 1, 28, 28}, 1);
  stage_replica t(m, true, true, 4, 2);
  BOOST_CHECK_THROW(t.forward(big), contract_error);  // more rows than the buffers hold
}

// The backend path (tensor/compute.hpp) on the CPU backend, staged like a device: every
// upload, download, mirror and table call a CUDA run makes, computing exactly what the
// host computes (the CPU backend runs the same host ops in the same order).
BOOST_AUTO_TEST_CASE(the_backend_path_computes_what_the_host_computes) {
  auto cpu = backend_context::open(cpu_device);
  BOOST_REQUIRE(cpu.has_value());
  const compute staged(*cpu, true);
  BOOST_REQUIRE(!staged.host_memory());
  for (const char* spec : {"mlp", "cnn"}) {
    const model m = build(spec);
    const minibatch mb = random_batch(24, 9);
    const reference ref = unsplit(m, mb);
    for (auto [cuts, micro] : {std::pair{std::vector<int>{}, 1}, std::pair{std::vector<int>{2}, 3}})
      BOOST_TEST_CONTEXT(spec << " with " << cuts.size() + 1 << " stages, M=" << micro) {
        const auto host = run_pipeline(m, cuts, micro, pipeline_schedule::one_f_one_b, ref.params, mb);
        const auto through = run_pipeline(m, cuts, micro, pipeline_schedule::one_f_one_b, ref.params, mb, staged);
        BOOST_TEST(bitwise_equal(through.grads, host.grads));
        BOOST_TEST(through.loss == host.loss);
        BOOST_TEST(through.peak == host.peak);
      }
  }
  BOOST_TEST(cpu->memory().allocations > 0u);  // the buffers came from the backend
}
