// Tests for train/text_sampler.cpp: the text starts with the prompt and grows by the
// asked number of characters, follows the model's scores (a model that strongly prefers
// one character writes it), is the same for the same seed, and a model that is not a
// language model over the vocabulary is refused.
#define BOOST_TEST_MODULE text_sampler
#include <boost/test/unit_test.hpp>

#include "train/text_sampler.hpp"

using namespace troupe;

namespace {

model tiny_lm() {
  auto m = model::build(*parse_model_spec("layers:embedding 4; attention 2; linear classes"), {8}, 3);
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  return *m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_strong_preference_is_written_and_the_seed_fixes_the_text) {
  const model m = tiny_lm();
  const std::vector<std::string> vocab{"a", "b", "\xc3\xa9"};
  tensor params({m.num_params()});
  m.init_params(params, 3);
  const sample_options o{20, 1.0f, 5};
  const std::string x = sample_text(m, params, vocab, {0, 1}, o);
  BOOST_TEST(x.substr(0, 2) == "ab");
  BOOST_TEST(x == sample_text(m, params, vocab, {0, 1}, o));
  // The logits' bias (the last block) far above the rest for class 2: every new character is 'é'.
  const auto& bias = m.blocks().back();
  BOOST_REQUIRE(bias.name == "fc1.bias");
  params.data<float>()[bias.offset + 2] = 50.f;
  std::string want = "ab";
  for (int i = 0; i < 20; ++i) want += "\xc3\xa9";
  BOOST_TEST(sample_text(m, params, vocab, {0, 1}, o) == want);
}

BOOST_AUTO_TEST_CASE(a_model_that_is_not_a_language_model_is_refused) {
  const model m = tiny_lm();
  tensor params({m.num_params()});
  BOOST_CHECK_THROW(sample_text(m, params, {"a", "b"}, {}, {}), std::exception);
  auto mlp = model::build(*parse_model_spec("mlp:8-3"), {8}, 3);
  BOOST_REQUIRE(mlp.has_value());
  tensor p2({mlp->num_params()});
  BOOST_CHECK_THROW(sample_text(*mlp, p2, {"a", "b", "c"}, {}, {}), std::exception);
}
