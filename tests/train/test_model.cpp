// Tests for train/model.cpp: building from specs, the parameter block layout,
// deterministic initialisation under both schemes, an end-to-end gradient check, and cutting into stages
// that compute bitwise what the whole model computes.
#define BOOST_TEST_MODULE model
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/loss.hpp"
#include "tests/support/layer_gradients.hpp"
#include "tests/support/numeric.hpp"
#include "train/model.hpp"

using namespace troupe;
using test::same_bits;

namespace {

model build(const char* spec, shape in = {1, 28, 28}, std::int64_t classes = 10) {
  auto s = parse_model_spec(spec);
  BOOST_REQUIRE(s.has_value());
  auto m = model::build(*s, in, classes);
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  return *m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(mlp_blocks_and_sizes) {
  model m = build("mlp");
  BOOST_TEST(m.num_params() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  BOOST_REQUIRE(m.blocks().size() == 6u);
  BOOST_TEST(m.blocks()[0].name == "fc1.weight");
  BOOST_TEST(m.blocks()[0].shape == (shape{256, 784}));
  BOOST_TEST(m.blocks()[5].name == "fc3.bias");
  BOOST_TEST(m.blocks()[5].offset + m.blocks()[5].numel == m.num_params());
  BOOST_TEST(m.output_shape() == (shape{10}));
}

BOOST_AUTO_TEST_CASE(cnn_blocks_and_shapes) {
  model m = build("cnn");
  BOOST_REQUIRE(m.blocks().size() == 8u);
  BOOST_TEST(m.blocks()[0].name == "conv1.weight");
  BOOST_TEST(m.blocks()[0].shape == (shape{32, 1, 3, 3}));
  BOOST_TEST(m.blocks()[2].shape == (shape{64, 32, 3, 3}));
  BOOST_TEST(m.blocks()[4].shape == (shape{128, 64 * 7 * 7}));
  BOOST_TEST(m.layer_at(6).out_shape() == (shape{64 * 7 * 7}));
  BOOST_TEST(m.forward_flops_per_sample() > 8e6);
}

// A residual block is one layer; its blocks are named after it and its own layers, and
// a block that does not fit is reported with the model's layer.
BOOST_AUTO_TEST_CASE(a_residual_block_is_one_layer_with_its_layers_parameters) {
  model m = build("layers:flatten; linear 16; residual(layernorm, linear 8, gelu, linear 16); linear 10");
  BOOST_TEST(m.num_layers() == 4);
  std::vector<std::string> names;
  for (const auto& b : m.blocks()) names.push_back(b.name);
  BOOST_TEST((names == std::vector<std::string>{"fc1.weight", "fc1.bias", "res1.0.weight", "res1.0.bias",
                                                "res1.1.weight", "res1.1.bias", "res1.3.weight", "res1.3.bias",
                                                "fc2.weight", "fc2.bias"}));
  BOOST_TEST(m.blocks()[2].layer == 2);
  BOOST_TEST(m.describe().find("residual(layernorm(16), linear(16 -> 8), gelu, linear(8 -> 16))") !=
             std::string::npos, m.describe());
  auto s = parse_model_spec("layers:flatten; linear 16; residual(linear 8); linear 10");
  BOOST_REQUIRE(s.has_value());
  auto bad = model::build(*s, {1, 28, 28}, 10);
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().message.find("layer 2: a residual block must end in its input's shape (16)") !=
             std::string::npos, bad.error().message);
}

BOOST_AUTO_TEST_CASE(gpt_has_gpt2s_parameter_count_and_one_row_of_scores_a_position) {
  const std::int64_t context = 256, vocab = 100, c = 384, layers = 6;
  model m = build("gpt", {context}, vocab);
  BOOST_TEST(m.output_shape() == (shape{context, vocab}));
  BOOST_TEST(m.classes() == vocab);
  BOOST_TEST(m.positions() == context);
  // Embeddings; per block 12C^2 + 13C (attention 4C^2 + 4C, feed-forward 8C^2 + 5C, two
  // layer norms 4C); the last layer norm and the logits.
  const std::int64_t want = (vocab + context) * c + layers * (12 * c * c + 13 * c) + 2 * c + (c * vocab + vocab);
  BOOST_TEST(m.num_params() == want);
  BOOST_TEST(m.blocks()[0].name == "embed.weight");
  BOOST_TEST(m.blocks()[1].name == "embed.position");
  BOOST_TEST(m.blocks()[4].name == "res1.1.qkv.weight");
  BOOST_TEST(m.blocks()[4].shape == (shape{3 * c, c}));
  auto on_images = model::build(*parse_model_spec("gpt:layers=1,dim=8,heads=2"), {1, 28, 28}, 10);
  BOOST_REQUIRE(!on_images.has_value());
  BOOST_TEST(on_images.error().message.find("text dataset") != std::string::npos, on_images.error().message);
}

BOOST_AUTO_TEST_CASE(mismatched_data_is_reported) {
  auto small = model::build(*parse_model_spec("mlp:100-10"), {1, 28, 28}, 10);
  BOOST_REQUIRE(!small.has_value());
  BOOST_TEST(small.error().message.find("784") != std::string::npos);
  auto classes = model::build(*parse_model_spec("mlp:784-5"), {1, 28, 28}, 10);
  BOOST_REQUIRE(!classes.has_value());
  BOOST_TEST(classes.error().message.find("10 classes") != std::string::npos);
  BOOST_TEST(!model::build(*parse_model_spec("cnn"), {784}, 10).has_value());
}

BOOST_AUTO_TEST_CASE(initialisation_is_deterministic_and_scaled) {
  model m = build("mlp");
  tensor a({m.num_params()}), b({m.num_params()}), c({m.num_params()});
  m.init_params(a, 7);
  m.init_params(b, 7);
  m.init_params(c, 8);
  BOOST_TEST(same_bits(a, b));
  BOOST_TEST(!same_bits(a, c));
  const param_block& w = m.blocks()[0];
  double sq = 0;
  for (std::int64_t i = 0; i < w.numel; ++i) sq += std::pow(a.data<float>()[w.offset + i], 2);
  BOOST_TEST(std::sqrt(sq / w.numel) == std::sqrt(2.0 / 784), boost::test_tools::tolerance(0.02));
  const param_block& bias = m.blocks()[1];
  for (std::int64_t i = 0; i < bias.numel; ++i) BOOST_TEST(a.data<float>()[bias.offset + i] == 0.f);
}

// PyTorch's defaults: every weight and bias of a linear or convolution layer uniform in
// +-1/sqrt(fan_in) (standard deviation bound/sqrt(3)); normalisation layers start at one
// and zero as under He's scheme.
BOOST_AUTO_TEST_CASE(pytorch_initialisation_draws_weight_layers_within_one_over_root_fan_in) {
  model m = build("layers:conv2d 16 k=3 pad=1; batchnorm; relu; flatten; linear 64; layernorm; gelu; linear classes",
                  {2, 8, 8}, 10);
  tensor he({m.num_params()}), torch({m.num_params()});
  m.init_params(he, 5);
  m.init_params(torch, 5, init_scheme::pytorch);
  int weight_layer_blocks = 0;
  for (const param_block& b : m.blocks()) {
    const float* t = torch.data<float>() + b.offset;
    const float* h = he.data<float>() + b.offset;
    BOOST_TEST_CONTEXT(b.name) {
      if (b.init == init_kind::ones || b.init == init_kind::zeros) {
        BOOST_TEST(std::memcmp(t, h, b.numel * 4) == 0);
        continue;
      }
      ++weight_layer_blocks;
      const double bound = 1.0 / std::sqrt(static_cast<double>(b.fan_in));
      double sq = 0, largest = 0;
      for (std::int64_t i = 0; i < b.numel; ++i) {
        sq += double(t[i]) * t[i];
        largest = std::max(largest, std::abs(double(t[i])));
      }
      BOOST_TEST(largest <= bound);
      BOOST_TEST(largest > 0.5 * bound);  // drawn, not left at zero
      if (b.numel >= 1000)
        BOOST_TEST(std::sqrt(sq / b.numel) == bound / std::sqrt(3.0), boost::test_tools::tolerance(0.03));
    }
  }
  BOOST_TEST(weight_layer_blocks == 6);  // conv, fc1 and fc2: a weight and a bias each
  auto bad = parse_init_scheme("xavier");
  BOOST_REQUIRE(!bad.has_value());
  BOOST_TEST(bad.error().message.find("'xavier'") != std::string::npos);
  BOOST_TEST(bad.error().message.find("he or pytorch") != std::string::npos);
  BOOST_TEST((*parse_init_scheme(name_of(init_scheme::pytorch)) == init_scheme::pytorch));
}

BOOST_AUTO_TEST_CASE(whole_model_gradient_matches_finite_differences) {
  model m = build("mlp:12-9-7-4", {12}, 4);
  const std::int64_t batch = 5;
  tensor params({m.num_params()}), grads({m.num_params()});
  m.init_params(params, 3);
  tensor x = test::random_tensor({batch, 12}, 4);
  tensor y({batch}, dtype::i32);
  for (int i = 0; i < batch; ++i) y.data<std::int32_t>()[i] = i % 4;
  auto acts = m.make_activations(batch);
  auto scratch = m.make_scratch(batch);
  tensor probs({batch, 4}), dlogits({batch, 4});
  auto loss = [&] { return softmax_xent_forward(probs, m.forward(acts, scratch, x, params), y); };
  loss();
  softmax_xent_backward(dlogits, probs, y, 1.f / batch);
  tensor dx({batch, 12});
  m.backward(acts, scratch, x, dlogits, params, grads, dx);
  test::check_gradient(params, grads, loss, 1e-3, 5e-4, 2e-2);
  test::check_gradient(x, dx, loss, 1e-3, 5e-4, 2e-2);
}

BOOST_AUTO_TEST_CASE(stages_compute_bitwise_what_the_whole_model_computes) {
  model m = build("cnn");
  auto stages = m.cut({4, 7});
  BOOST_REQUIRE(stages.has_value());
  BOOST_REQUIRE(stages->size() == 3u);
  const std::int64_t batch = 3;
  tensor full_params({m.num_params()});
  m.init_params(full_params, 11);
  std::vector<tensor> stage_params;
  std::int64_t total = 0;
  for (const model& s : *stages) {
    stage_params.emplace_back(shape{s.num_params()});
    s.init_params(stage_params.back(), 11);
    // A stage's blocks initialise exactly as the same blocks of the whole model.
    for (const auto& b : s.blocks())
      BOOST_TEST(std::memcmp(stage_params.back().data<float>() + b.offset,
                             full_params.data<float>() + m.blocks()[b.index].offset, b.numel * 4) == 0);
    total += s.num_params();
  }
  BOOST_TEST(total == m.num_params());

  tensor x = test::random_tensor({batch, 1, 28, 28}, 12);
  auto acts = m.make_activations(batch);
  auto scratch = m.make_scratch(batch);
  const_tensor_view full_out = m.forward(acts, scratch, x, full_params);

  std::vector<model_activations> sa;
  std::vector<model_scratch> ss;
  const_tensor_view cur = x;
  std::vector<const_tensor_view> inputs;
  for (std::size_t i = 0; i < stages->size(); ++i) {
    sa.push_back((*stages)[i].make_activations(batch));
    ss.push_back((*stages)[i].make_scratch(batch));
    inputs.push_back(cur);
    cur = (*stages)[i].forward(sa[i], ss[i], cur, stage_params[i]);
  }
  BOOST_TEST(same_bits(cur, full_out));

  tensor dy = test::random_tensor({batch, 10}, 13);
  tensor full_grads({m.num_params()});
  m.backward(acts, scratch, x, dy, full_params, full_grads, tensor_view());
  const_tensor_view g = dy;
  std::vector<tensor> stage_grads, grad_inputs;
  for (std::size_t i = 0; i < stages->size(); ++i) {
    stage_grads.emplace_back(shape{(*stages)[i].num_params()});
    grad_inputs.emplace_back((*stages)[i].input_shape().prepend(batch));
  }
  for (int i = static_cast<int>(stages->size()) - 1; i >= 0; --i) {
    tensor_view gin = i > 0 ? grad_inputs[i].view() : tensor_view();
    (*stages)[i].backward(sa[i], ss[i], inputs[i], g, stage_params[i], stage_grads[i], gin);
    g = grad_inputs[i];
  }
  for (std::size_t i = 0; i < stages->size(); ++i)
    for (const auto& b : (*stages)[i].blocks())
      BOOST_TEST_CONTEXT(b.name) {
        BOOST_TEST(std::memcmp(stage_grads[i].data<float>() + b.offset,
                               full_grads.data<float>() + m.blocks()[b.index].offset, b.numel * 4) == 0);
      }
}

BOOST_AUTO_TEST_CASE(invalid_cuts_are_reported) {
  model m = build("mlp");
  BOOST_TEST(!m.cut({0}).has_value());
  BOOST_TEST(!m.cut({3, 3}).has_value());
  BOOST_TEST(!m.cut({6}).has_value());
  BOOST_TEST(m.cut({}).has_value());
}

BOOST_AUTO_TEST_CASE(buffers_bound_the_batch) {
  model m = build("mlp");
  auto acts = m.make_activations(4);
  auto scratch = m.make_scratch(4);
  tensor params({m.num_params()}), x({5, 784});
  BOOST_CHECK_THROW(m.forward(acts, scratch, x, params), contract_error);
  // A smaller batch than the capacity is fine.
  BOOST_CHECK_NO_THROW(m.forward(acts, scratch, x.view().slice(0, 2), params));
}

// Note [Dropout seeds]: a training pass draws its masks from the pass's seed and each
// layer's index in the full model, so stages draw exactly the whole model's masks (inside
// a residual block too); another seed draws others; an evaluation drops nothing.
BOOST_AUTO_TEST_CASE(dropout_masks_follow_the_pass_seed_and_survive_cutting) {
  model m = build("layers:flatten; linear 32; relu; dropout 0.5; linear 16; residual(linear 16, relu, dropout 0.3); "
                  "linear 10");
  auto stages = m.cut({3, 5});
  BOOST_REQUIRE(stages.has_value());
  const std::int64_t batch = 4;
  tensor params({m.num_params()});
  m.init_params(params, 5);
  tensor x = test::random_tensor({batch, 1, 28, 28}, 6);
  auto acts = m.make_activations(batch);
  auto scratch = m.make_scratch(batch);
  const forward_pass pass = test::training_pass(99);
  auto host_copy = [](const_tensor_view v) {
    tensor t(v.sizes());
    copy(t, v);
    return t;
  };
  const tensor train = host_copy(m.forward(acts, scratch, x, params, host_compute(), pass));
  const_tensor_view cur = x;
  std::vector<model_activations> sa;
  std::vector<model_scratch> ss;
  std::vector<tensor> sp;
  for (const model& s : *stages) {
    sp.emplace_back(shape{s.num_params()});
    s.init_params(sp.back(), 5);
    sa.push_back(s.make_activations(batch));
    ss.push_back(s.make_scratch(batch));
    cur = s.forward(sa.back(), ss.back(), cur, sp.back(), host_compute(), pass);
  }
  BOOST_TEST(same_bits(cur, train));
  BOOST_TEST(same_bits(m.forward(acts, scratch, x, params, host_compute(), pass), train));
  BOOST_TEST(!same_bits(m.forward(acts, scratch, x, params, host_compute(), test::training_pass(100)), train));
  const tensor eval = host_copy(m.forward(acts, scratch, x, params));
  forward_pass seeded_evaluation;  // a seed does not make an evaluation drop
  seeded_evaluation.seed = 99;
  BOOST_TEST(!same_bits(eval, train));
  BOOST_TEST(same_bits(m.forward(acts, scratch, x, params, host_compute(), seeded_evaluation), eval));
}

// Note [Population statistics]: the model lays out its layers' statistics (a residual
// block's inner ones within its share); a calibration pass on one batch makes an
// evaluation of that batch the training forward, and another batch is normalised with
// the calibrated statistics, not its own.
BOOST_AUTO_TEST_CASE(statistics_are_laid_out_calibrated_and_used) {
  model m = build("layers:conv2d 4 pad=1; batchnorm; relu; residual(conv2d 4 pad=1, batchnorm, relu); maxpool2d; "
                  "flatten; linear 10");
  BOOST_TEST(m.stats_floats() == 16);
  auto stages = m.cut({3});
  BOOST_REQUIRE(stages.has_value());
  BOOST_TEST((*stages)[0].stats_floats() == 8);
  BOOST_TEST((*stages)[1].stats_floats() == 8);
  const std::int64_t batch = 6;
  tensor params({m.num_params()});
  m.init_params(params, 3);
  // A block's weights start He-initialised when batchnorm then relu follow.
  BOOST_TEST((m.blocks()[0].init == init_kind::he_normal));
  tensor x = test::random_tensor({batch, 1, 28, 28}, 4), other = test::random_tensor({batch, 1, 28, 28}, 5, 3.f);
  auto acts = m.make_activations(batch);
  auto scratch = m.make_scratch(batch);
  auto host_copy = [](const_tensor_view v) {
    tensor t(v.sizes());
    copy(t, v);
    return t;
  };
  const tensor train = host_copy(m.forward(acts, scratch, x, params, host_compute(), test::training_pass(1)));
  tensor stats({m.stats_floats()});
  m.forward(acts, scratch, x, params, host_compute(), test::calibration_pass(stats, 0));
  BOOST_TEST(same_bits(m.forward(acts, scratch, x, params, host_compute(), test::evaluation_with(stats)), train));
  const tensor own = host_copy(m.forward(acts, scratch, other, params));
  BOOST_TEST(!same_bits(m.forward(acts, scratch, other, params, host_compute(), test::evaluation_with(stats)), own));
}

// Note [The resnet model]: its parameters by hand (3x3 convolutions with biases, a weight
// and a bias per batchnorm channel, the logits over 2W x 7 x 7) and its statistics (a mean
// and a variance per batchnorm channel).
BOOST_AUTO_TEST_CASE(resnet_has_its_hand_counted_parameters_and_statistics) {
  const model m = build("resnet");
  const std::int64_t w = 32;
  auto conv = [](std::int64_t in, std::int64_t out) { return out * in * 9 + out; };
  const std::int64_t want = conv(1, w) + 2 * w + 2 * conv(w, w) + 4 * w + conv(w, 2 * w) + 4 * w +
                            2 * conv(2 * w, 2 * w) + 8 * w + 2 * w * 49 * 10 + 10;
  BOOST_TEST(m.num_params() == want);
  BOOST_TEST(m.stats_floats() == 18 * w);
  BOOST_TEST(m.output_shape() == (shape{10}));
}
