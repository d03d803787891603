// Tests for tools/text_report.cpp: bits per character from nats, and the JSON a language
// model's run ends with: the bits always, a sample of the asked length unless 0, the same
// sample for the same seed.
#define BOOST_TEST_MODULE text_report
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "tools/text_report.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(bits_per_character_are_nats_over_ln_2) {
  BOOST_TEST(cli::bits_per_char(std::log(2.0)) == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(cli::bits_per_char(std::log(256.0)) == 8.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_language_models_json_has_its_bits_and_a_sample_of_the_asked_length) {
  auto m = model::build(*parse_model_spec("layers:embedding 4; attention 2; linear classes"), {8}, 3);
  BOOST_REQUIRE(m.has_value());
  tensor params({m->num_params()});
  m->init_params(params, 3);
  const std::vector<std::string> vocab{"a", "b", "c"};

  nlohmann::ordered_json none;
  cli::add_text_output(none, "test", std::log(2.0) * 1.5, params, {&*m, &vocab, 0, 7});
  BOOST_TEST(none.size() == 1u);
  BOOST_TEST(none["validation_bits_per_char"].get<double>() == 1.5);

  nlohmann::ordered_json a, b, other;
  cli::add_text_output(a, "test", 1.0, params, {&*m, &vocab, 25, 7});
  cli::add_text_output(b, "test", 1.0, params, {&*m, &vocab, 25, 7});
  cli::add_text_output(other, "test", 1.0, params, {&*m, &vocab, 25, 8});
  const std::string text = a["sample"].get<std::string>();
  BOOST_TEST(text.size() == 26u);  // the first character, then 25 more (one byte each)
  BOOST_TEST(text.find_first_not_of("abc") == std::string::npos);
  BOOST_TEST(text == b["sample"].get<std::string>());
  BOOST_TEST(text != other["sample"].get<std::string>());
}
