// Tests for train/trainer.cpp: the MLP learns a 10k-sample subset of Fashion-MNIST to at
// least 80% in one epoch, runs are bitwise reproducible for a seed (and through a backend),
// a run starts from given parameters, and a diverging run stops with a message that says
// what to change.
#define BOOST_TEST_MODULE trainer
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <functional>

#include "tensor/backend.hpp"
#include "train/model_spec.hpp"
#include "train/text_dataset.hpp"
#include "train/trainer.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(mlp_learns_fashion_mnist_subset) {
  auto data = load_fashion_mnist(std::string(default_fashion_mnist_dir));
  BOOST_REQUIRE_MESSAGE(data.has_value(), (data ? "" : data.error().message));
  data->train = head(data->train, 10000);
  local_train_config cfg;
  cfg.epochs = 1;
  int epochs_seen = 0;
  std::int64_t steps_seen = 0;
  train_callbacks cb;
  cb.on_step = [&](const step_progress&) { ++steps_seen; };
  cb.on_epoch = [&](const epoch_report& r) {
    ++epochs_seen;
    BOOST_TEST(r.train_loss > 0.0);
  };
  auto r = train_local(cfg, *data, cb);
  BOOST_REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error().message));
  BOOST_TEST_MESSAGE("test accuracy " << r->test_accuracy);
  BOOST_TEST(r->test_accuracy >= 0.80);
  BOOST_TEST(epochs_seen == 1);
  BOOST_TEST(steps_seen == (10000 + 127) / 128);
  BOOST_TEST(r->samples_per_second > 0.0);
}

namespace {

// Trains `cfg` twice (bitwise the same parameters), then once changed by `vary` (other
// parameters of the same size).
void expect_reproducible_and_changed(local_train_config cfg, const dataset_split& data,
                                     const std::function<void(local_train_config&)>& vary) {
  auto a = train_local(cfg, data), b = train_local(cfg, data);
  BOOST_REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.error().message));
  BOOST_REQUIRE(b.has_value());
  BOOST_TEST(std::memcmp(a->params.bytes(), b->params.bytes(), a->params.nbytes()) == 0);
  vary(cfg);
  auto c = train_local(cfg, data);
  BOOST_REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().message));
  BOOST_REQUIRE(c->params.nbytes() == a->params.nbytes());
  BOOST_TEST(std::memcmp(a->params.bytes(), c->params.bytes(), a->params.nbytes()) != 0);
}

// 400 characters of "abc..." cut into windows of 8.
expected<dataset_split> abc_text() {
  std::string text;
  for (int i = 0; i < 400; ++i) text += static_cast<char>('a' + i % 3);
  return make_text_split(*decode_text(text, "t"), 8, "t");
}

}  // namespace

BOOST_AUTO_TEST_CASE(runs_are_bitwise_reproducible) {
  local_train_config cfg;
  cfg.epochs = 2;
  cfg.batch_size = 50;
  expect_reproducible_and_changed(cfg, make_synthetic(1000, 200, 4), [](local_train_config& c) { c.seed = 2; });
}

// Dropout draws its masks from the seed and the step (Note [Dropout seeds]): a run with
// dropout is reproducible, and the masks change what it learns.
BOOST_AUTO_TEST_CASE(runs_with_dropout_are_bitwise_reproducible) {
  local_train_config cfg;
  cfg.epochs = 1;
  cfg.batch_size = 50;
  cfg.model = "layers:flatten; linear 64; relu; dropout 0.5; linear classes";
  expect_reproducible_and_changed(cfg, make_synthetic(1000, 200, 4), [](local_train_config& c) {
    c.model = "layers:flatten; linear 64; relu; linear classes";
  });
}

// initial_params (train-local --init-from): the seed's own parameters given explicitly
// train bitwise as the seed does; other ones change the result; a wrong count is named.
BOOST_AUTO_TEST_CASE(a_run_starts_from_given_parameters) {
  auto data = make_synthetic(1000, 200, 4);
  local_train_config cfg;
  cfg.epochs = 1;
  cfg.batch_size = 50;
  auto plain = train_local(cfg, data);
  BOOST_REQUIRE(plain.has_value());
  auto spec = parse_model_spec(cfg.model);
  auto m = model::build(*spec, data.train.sample_shape(), data.train.num_classes);
  BOOST_REQUIRE(m.has_value());
  cfg.initial_params = tensor::uninitialized({m->num_params()});
  m->init_params(cfg.initial_params, cfg.seed);
  auto same = train_local(cfg, data);
  BOOST_REQUIRE(same.has_value());
  BOOST_TEST(std::memcmp(plain->params.bytes(), same->params.bytes(), plain->params.nbytes()) == 0);
  m->init_params(cfg.initial_params, cfg.seed + 1);
  auto other = train_local(cfg, data);
  BOOST_REQUIRE(other.has_value());
  BOOST_TEST(std::memcmp(plain->params.bytes(), other->params.bytes(), plain->params.nbytes()) != 0);
  cfg.initial_params = tensor::uninitialized({7});
  auto wrong = train_local(cfg, data);
  BOOST_REQUIRE(!wrong.has_value());
  BOOST_TEST(wrong.error().message.find("initial parameters number 7") != std::string::npos, wrong.error().message);
}

// Training through a backend (the CPU backend, staged like a device: parameters, batches
// and gradients cross host/backend copies every step) gives the host's run bit for bit.
BOOST_AUTO_TEST_CASE(training_through_a_backend_matches_the_host) {
  auto data = make_synthetic(600, 200, 4);
  local_train_config cfg;
  cfg.epochs = 2;
  cfg.batch_size = 50;
  auto cpu = backend_context::open(cpu_device);
  BOOST_REQUIRE(cpu.has_value());
  const compute staged(*cpu, true);
  auto host = train_local(cfg, data);
  auto through = train_local(cfg, data, {}, staged);
  BOOST_REQUIRE(host.has_value());
  BOOST_REQUIRE_MESSAGE(through.has_value(), (through ? "" : through.error().message));
  BOOST_TEST(through->test_accuracy == host->test_accuracy);
  BOOST_TEST(std::memcmp(through->params.bytes(), host->params.bytes(), host->params.nbytes()) == 0);
}

BOOST_AUTO_TEST_CASE(divergence_is_reported) {
  auto data = make_synthetic(1000, 100, 4);
  local_train_config cfg;
  cfg.epochs = 3;
  cfg.lr = 1e6f;
  auto r = train_local(cfg, data);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("diverged") != std::string::npos);
  BOOST_TEST(r.error().message.find("--lr") != std::string::npos);
}

// --augment crops and flips images: a text is refused with the fix, and so is a bad text.
BOOST_AUTO_TEST_CASE(augmenting_what_is_not_an_image_is_refused) {
  auto data = abc_text();
  BOOST_REQUIRE(data.has_value());
  local_train_config cfg;
  cfg.model = "layers:embedding 4; linear classes";
  cfg.augment = "crop=2,flip";
  auto r = train_local(cfg, *data);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("use --augment none") != std::string::npos, r.error().message);
  cfg.augment = "twist";
  auto t = train_local(cfg, *data);
  BOOST_REQUIRE(!t.has_value());
  BOOST_TEST(t.error().message.find("unknown item 'twist'") != std::string::npos, t.error().message);
}

// Augmented runs are reproducible from the seed, and the augmentation changes what is learnt.
BOOST_AUTO_TEST_CASE(augmented_runs_are_bitwise_reproducible) {
  local_train_config cfg;
  cfg.epochs = 1;
  cfg.batch_size = 50;
  cfg.augment = "crop=2,flip";
  expect_reproducible_and_changed(cfg, make_synthetic(600, 100, 4), [](local_train_config& c) { c.augment = "none"; });
}

// --augment shift on a text: reproducible from the seed, and it changes what is learnt;
// on images it is refused with the fix.
BOOST_AUTO_TEST_CASE(shifted_text_runs_are_bitwise_reproducible) {
  std::string text;  // no short period, so every shift shows other windows
  for (int i = 0; i < 800; ++i) text += static_cast<char>('a' + (i * i + i / 7) % 5);
  auto data = make_text_split(*decode_text(text, "t"), 8, "t");
  BOOST_REQUIRE(data.has_value());
  local_train_config cfg;
  cfg.model = "layers:embedding 4; linear classes";
  cfg.epochs = 2;
  cfg.batch_size = 10;
  cfg.augment = "shift";
  expect_reproducible_and_changed(cfg, *data, [](local_train_config& c) { c.augment = "none"; });
  cfg.model = local_train_config{}.model;
  auto images = train_local(cfg, make_synthetic(100, 20, 4));
  BOOST_REQUIRE(!images.has_value());
  BOOST_TEST(images.error().message.find("(not a text)") != std::string::npos, images.error().message);
}

BOOST_AUTO_TEST_CASE(a_model_that_scores_whole_samples_is_refused_on_a_text) {
  auto data = abc_text();
  BOOST_REQUIRE(data.has_value());
  local_train_config cfg;
  cfg.model = "layers:embedding 4; flatten; linear classes";
  auto r = train_local(cfg, *data);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("label(s) a sample") != std::string::npos, r.error().message);
}

BOOST_AUTO_TEST_CASE(model_that_does_not_fit_is_reported) {
  auto data = make_synthetic(100, 10, 4);
  local_train_config cfg;
  cfg.model = "mlp:100-10";
  auto r = train_local(cfg, data);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("784") != std::string::npos);
}
