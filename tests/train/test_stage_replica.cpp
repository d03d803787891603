// Tests for train/stage_replica.cpp: one minibatch run through K stages and M
// microbatches (each stage running every forward, then every backward) produces the
// parameter gradients and loss of the unsplit model: bitwise with one microbatch (the
// same operations in the same order), and within a stated tolerance with several (the
// batch sums of the weight gradients are split into M partial sums). Slots are bounded,
// the backend path computes what the host computes, and forward and backward in parts
// are bitwise forward and backward. The schedules' interleavings are tested in tests/core/test_pipeline_schedule.cpp.
#define BOOST_TEST_MODULE stage_replica
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "tests/support/pipeline_sim.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

// Every stage runs all its forwards, then all its backwards, and keeps M slots.
pipeline_outcome run_plainly(const model& m, const std::vector<int>& cuts, int micro, const reference& ref,
                             const minibatch& mb, const compute& c = host_compute()) {
  const std::size_t k = cuts.size() + 1;
  return run_pipeline(m, cuts, micro, std::vector<std::vector<stage_step>>(k, forwards_then_backwards(micro)),
                      std::vector<int>(k, micro), ref.params, mb, c);
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_microbatch_is_bitwise_the_unsplit_model) {
  for (const char* spec : {"mlp", "cnn"}) {
    const model m = build_model(spec);
    const minibatch mb = random_batch(24, 3);
    const reference ref = unsplit(m, mb);
    std::vector<std::vector<int>> cut_sets{{}, {2}, {1, 3}};
    if (m.num_layers() > 6) cut_sets.push_back({2, 5, 7});
    for (const auto& cuts : cut_sets)
      BOOST_TEST_CONTEXT(spec << " with " << cuts.size() + 1 << " stages") {
        const auto out = run_plainly(m, cuts, 1, ref, mb);
        BOOST_TEST(same_bits(out.grads, ref.grads));
        BOOST_TEST(out.loss == ref.loss);
      }
  }
}

// Tolerance: splitting a batch of 24 into M partial sums changes only the float rounding
// of the weight-gradient reductions; 1e-5 of the largest gradient is ~100 ulps there.
BOOST_AUTO_TEST_CASE(microbatches_match_the_unsplit_model_within_rounding) {
  for (const char* spec : {"mlp", "cnn"}) {
    const model m = build_model(spec);
    const minibatch mb = random_batch(24, 5);
    const reference ref = unsplit(m, mb);
    for (int micro : {2, 3, 4, 8})
      BOOST_TEST_CONTEXT(spec << " K=3 M=" << micro) {
        const auto out = run_plainly(m, {1, 3}, micro, ref, mb);
        BOOST_TEST(max_relative_difference(out.grads, ref.grads) < 1e-5);
        BOOST_TEST(std::fabs(out.loss - ref.loss) < 1e-5 * std::fabs(ref.loss));
        BOOST_TEST(!same_bits(out.grads, ref.grads));  // the test sees real partial sums
        for (int peak : out.peak) BOOST_TEST(peak == micro);
      }
  }
}

// A language model's loss is the mean over every position of every sequence; cut into 2
// and 4 stages, one step gives the unsplit loss and gradients: bitwise with one
// microbatch, within rounding with several.
BOOST_AUTO_TEST_CASE(a_gpt_in_stages_gives_the_unsplit_loss_and_gradients) {
  const std::int64_t context = 8, vocab = 10;
  const model m = build_model("gpt:layers=2,dim=16,heads=2", {context});
  BOOST_TEST(m.output_shape() == (shape{context, vocab}));
  BOOST_TEST(m.positions() == context);
  const minibatch mb = random_text_batch(6, context, vocab, 21);
  const reference ref = unsplit(m, mb);
  BOOST_TEST((ref.loss > 1.0 && ref.loss < 2 * std::log(10.0)));  // about chance (ln 10) at initialisation
  for (const std::vector<int>& cuts : {std::vector<int>{3}, std::vector<int>{1, 3, 5}})
    BOOST_TEST_CONTEXT(cuts.size() + 1 << " stages") {
      const auto one = run_plainly(m, cuts, 1, ref, mb);
      BOOST_TEST(same_bits(one.grads, ref.grads));
      BOOST_TEST(one.loss == ref.loss);
      const auto three = run_plainly(m, cuts, 3, ref, mb);
      BOOST_TEST(max_relative_difference(three.grads, ref.grads) < 1e-5);
      BOOST_TEST(std::fabs(three.loss - ref.loss) < 1e-5 * ref.loss);
    }
}

// A training pass keeps its seed across a forward in parts (Note [Dropout seeds]): the
// parts draw the masks forward() draws, and another seed draws others.
BOOST_AUTO_TEST_CASE(a_forward_in_parts_keeps_its_dropout_seed) {
  const model m = build_model("layers:flatten; linear 32; relu; dropout 0.5; linear 10");
  const tensor x = random_tensor({4, 1, 28, 28}, 3);
  stage_replica whole(m, true, true, 4, 1), parts(m, true, true, 4, 1), other(m, true, true, 4, 1);
  for (stage_replica* r : {&whole, &parts, &other}) {
    m.init_params(r->params(), 7);
    r->commit_params();
  }
  whole.forward(x, 41);
  const int slot = parts.begin_forward(x, 41);
  for (int l = 1; l < m.num_layers(); ++l) parts.forward_up_to(l);
  parts.end_forward();
  BOOST_TEST(same_bits(parts.output(slot), whole.output(0)));
  other.forward(x, 42);
  BOOST_TEST(!same_bits(other.output(0), whole.output(0)));
}

BOOST_AUTO_TEST_CASE(slots_and_rows_are_bounded) {
  const model m = build_model("mlp");
  stage_replica s(m, true, true, 4, 1);
  const tensor x = random_tensor({4, 1, 28, 28}, 1);
  s.forward(x);
  BOOST_TEST(s.stored() == 1);
  BOOST_CHECK_THROW(s.forward(x), contract_error);  // both slots would be needed
  const tensor big = random_tensor({5, 1, 28, 28}, 1);
  stage_replica t(m, true, true, 4, 2);
  BOOST_CHECK_THROW(t.forward(big), contract_error);  // more rows than the buffers hold
}

// Forward in parts (layer-by-layer pulls) is bitwise forward(); backward in parts
// (gradient buckets): after backward_down_to(l) the gradients of layers >= l are final
// and the others untouched; the end is bitwise backward()'s.
BOOST_AUTO_TEST_CASE(forward_and_backward_in_parts_are_bitwise_forward_and_backward) {
  for (const char* spec : {"mlp", "cnn"}) {
    const model full = build_model(spec);
    const minibatch mb = random_batch(8, 11);
    for (bool first : {true, false})
      BOOST_TEST_CONTEXT(spec << (first ? " whole" : " without its first layer")) {
        // Without its first layer the stage is not first: it returns dL/d(input).
        const model m = first ? full : full.stage(1, full.num_layers());
        stage_replica whole(m, first, true, 8, 1), parts(m, first, true, 8, 1);
        tensor x = mb.x;
        if (!first) x = random_tensor(m.input_shape().prepend(8), 12);
        for (stage_replica* r : {&whole, &parts}) {
          m.init_params(r->params(), 7);
          r->commit_params();
          r->zero_grads();
        }
        whole.loss(whole.forward(x), mb.y, 1.f / 8);
        const int slot = parts.begin_forward(x);
        for (int l = 1; l < m.num_layers(); ++l) parts.forward_up_to(l);
        parts.end_forward();
        BOOST_TEST(same_bits(parts.output(slot), whole.output(0)));
        parts.loss(slot, mb.y, 1.f / 8);
        const_tensor_view gin = whole.backward(0, const_tensor_view());
        parts.begin_backward(0, const_tensor_view());
        for (int l = m.num_layers() - 1; l > 0; --l) {
          parts.backward_down_to(l);
          for (const param_block& b : m.blocks()) {
            const auto mine = parts.grads().view().flat(b.offset, b.numel);
            if (b.layer >= l)
              BOOST_TEST(same_bits(mine, whole.grads().view().flat(b.offset, b.numel)), b.name << " at layer " << l);
            else
              BOOST_TEST(std::all_of(mine.data<float>(), mine.data<float>() + b.numel, [](float v) { return v == 0.f; }),
                         b.name << " at layer " << l);
          }
        }
        const_tensor_view pin = parts.end_backward();
        BOOST_TEST(same_bits(parts.grads(), whole.grads()));
        BOOST_TEST(first == pin.empty());
        if (!first) BOOST_TEST(same_bits(pin, gin));
        BOOST_TEST(parts.stored() == 0);
      }
  }
}

// The backend path (tensor/compute.hpp) on the CPU backend, staged like a device: every
// upload, download, mirror and table call a CUDA run makes, computing exactly what the
// host computes (the CPU backend runs the same host ops in the same order).
BOOST_AUTO_TEST_CASE(the_backend_path_computes_what_the_host_computes) {
  auto cpu = backend_context::open(cpu_device);
  BOOST_REQUIRE(cpu.has_value());
  const compute staged(*cpu, true);
  BOOST_REQUIRE(!staged.host_memory());
  // The layer list has a residual block (its scratch in the backend's memory), LayerNorm and GELU.
  for (const char* spec : {"mlp", "cnn", "layers:flatten; linear 32; residual(layernorm, linear 16, gelu, linear 32); "
                                         "gelu; linear 10"}) {
    const model m = build_model(spec);
    const minibatch mb = random_batch(24, 9);
    const reference ref = unsplit(m, mb);
    for (auto [cuts, micro] : {std::pair{std::vector<int>{}, 1}, std::pair{std::vector<int>{2}, 3}})
      BOOST_TEST_CONTEXT(spec << " with " << cuts.size() + 1 << " stages, M=" << micro) {
        const auto host = run_plainly(m, cuts, micro, ref, mb);
        const auto through = run_plainly(m, cuts, micro, ref, mb, staged);
        BOOST_TEST(same_bits(through.grads, host.grads));
        BOOST_TEST(through.loss == host.loss);
        BOOST_TEST(through.peak == host.peak);
      }
  }
  BOOST_TEST(cpu->memory().allocations > 0u);  // the buffers came from the backend
}
