// Tests for train/evaluate.cpp: accuracy and loss over a dataset that is not a multiple
// of the batch size, against a per-sample computation; a text scored by position, and a
// model whose rows of scores do not fit the labels named, and BatchNorm evaluated with
// statistics estimated from the training set.
#define BOOST_TEST_MODULE evaluate
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "tensor/loss.hpp"
#include "train/evaluate.hpp"
#include "train/text_dataset.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(batched_equals_per_sample) {
  auto data = make_synthetic(10, 53, 3);
  auto m = model::build(*parse_model_spec("mlp:784-16-10"), {1, 28, 28}, 10);
  BOOST_REQUIRE(m.has_value());
  tensor params({m->num_params()});
  m->init_params(params, 1);
  const eval_result batched = evaluate(*m, params, data.test, 20);
  const eval_result single = evaluate(*m, params, data.test, 1);
  BOOST_TEST(batched.samples == 53);
  BOOST_TEST(batched.accuracy == single.accuracy);
  // The batched forward multiplies 20 rows at a time, the other one row; OpenBLAS may use
  // different kernels for the two, so the f32 logits (and the loss) can differ in their
  // last bits (seen: 5e-9 relative on AVX-512). 1e-6 is a few f32 ulps of the loss.
  BOOST_TEST(batched.loss == single.loss, boost::test_tools::tolerance(1e-6));
  // Count by hand, one sample at a time.
  auto acts = m->make_activations(1);
  auto scratch = m->make_scratch(1);
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < 53; ++i) {
    auto out = m->forward(acts, scratch, data.test.images.view().slice(i, i + 1), params);
    correct += count_correct(out.reshape({1, 10}), data.test.labels.view().slice(i, i + 1));
  }
  BOOST_TEST(batched.accuracy == static_cast<double>(correct) / 53.0);
}

BOOST_AUTO_TEST_CASE(empty_dataset_gives_zero_samples) {
  dataset empty;
  empty.images = tensor({0, 1, 28, 28});
  empty.labels = tensor({0}, dtype::i32);
  auto m = model::build(*parse_model_spec("mlp"), {1, 28, 28}, 10);
  tensor params({m->num_params()});
  BOOST_TEST(evaluate(*m, params, empty).samples == 0);
}

// A text's window has a label at every position: its loss and accuracy are over positions,
// and a model that scores whole samples does not fit it (nor the other way round).
BOOST_AUTO_TEST_CASE(a_text_is_scored_by_position_and_a_mismatched_model_is_named) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += static_cast<char>('a' + (i * 7) % 5);
  auto split = make_text_split(*decode_text(text, "t"), 8, "t");
  BOOST_REQUIRE(split.has_value());
  auto lm = model::build(*parse_model_spec("layers:embedding 4; linear classes"), {8}, 5);
  BOOST_REQUIRE(lm.has_value());
  BOOST_TEST(!labels_mismatch(*lm, split->test).has_value());
  tensor params({lm->num_params()});
  lm->init_params(params, 1);
  const eval_result r = evaluate(*lm, params, split->test);
  BOOST_TEST(r.samples == split->test.size());
  BOOST_TEST((r.accuracy >= 0.0 && r.accuracy <= 1.0));
  BOOST_TEST(r.loss == std::log(5.0), boost::test_tools::tolerance(0.1));  // near chance at initialisation

  auto whole = model::build(*parse_model_spec("layers:embedding 4; flatten; linear classes"), {8}, 5);
  BOOST_REQUIRE(whole.has_value());
  auto why = labels_mismatch(*whole, split->train);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->message.find("8 label(s) a sample") != std::string::npos, why->message);
  BOOST_TEST(why->message.find("without flatten") != std::string::npos);
}

// Note [Population statistics]: a model with BatchNorm is evaluated with statistics
// estimated from fixed training batches (the same every call), not each test batch's own.
BOOST_AUTO_TEST_CASE(batchnorm_is_evaluated_with_statistics_from_the_training_set) {
  auto data = make_synthetic(1000, 300, 5);
  auto m = model::build(*parse_model_spec("layers:conv2d 4 pad=1; batchnorm; relu; flatten; linear 10"), {1, 28, 28}, 10);
  BOOST_REQUIRE(m.has_value());
  tensor params({m->num_params()});
  m->init_params(params, 2);
  const tensor stats = estimate_statistics(*m, params, data.train, host_compute());
  BOOST_TEST(stats.numel() == 8);
  BOOST_TEST(stats.data<float>()[4] > 0.f);  // a variance
  const eval_result a = evaluate(*m, params, data.test, 100, host_compute(), &data.train);
  const eval_result b = evaluate(*m, params, data.test, 100, host_compute(), &data.train);
  const eval_result own = evaluate(*m, params, data.test, 100);
  BOOST_TEST(a.loss == b.loss);
  BOOST_TEST(a.loss != own.loss);
  // Test batches of another size score the same with the population's statistics.
  const eval_result other = evaluate(*m, params, data.test, 30, host_compute(), &data.train);
  BOOST_TEST(other.loss == a.loss, boost::test_tools::tolerance(1e-6));
}
