// Tests for core/checkpoint_file.cpp: a checkpoint file carries the identity it was
// written under and is read back only under it, any other job, model or optimizer refused
// by name with the file's path; a file of another kind is refused; a description with a
// missing or mistyped field says what the file was meant to be.
#define BOOST_TEST_MODULE checkpoint_file
#include <boost/test/unit_test.hpp>

#include "core/checkpoint_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const checkpoint_identity id{"job-a", "mlp:4-3", 15, "sgd"};

}  // namespace

BOOST_AUTO_TEST_CASE(a_file_reads_back_under_its_identity_with_its_description_and_sections) {
  test::temp_dir dir("checkpoint-file");
  const auto file = dir.path / "state.tf";
  tensor t({3});
  t.data<float>()[1] = 2.5f;
  BOOST_REQUIRE(!write_checkpoint_file(file, "troupe-test", id, {{"step", 7}}, {{"values", t}}));
  auto back = read_checkpoint_file(file, "troupe-test", id);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(back->meta.at("step").get<int>() == 7);
  BOOST_TEST(back->meta.at("identity") == id.to_json());
  const tensor* values = back->find("values");
  BOOST_REQUIRE(values);
  BOOST_TEST(values->data<float>()[1] == 2.5f);
}

BOOST_AUTO_TEST_CASE(another_job_model_optimizer_or_kind_is_refused_by_name) {
  test::temp_dir dir("checkpoint-file-identity");
  const auto file = dir.path / "state.tf";
  BOOST_REQUIRE(!write_checkpoint_file(file, "troupe-test", id, nlohmann::json::object(), {}));
  auto other_job = id;
  other_job.job_id = "job-b";
  auto r = read_checkpoint_file(file, "troupe-test", other_job);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, file.string() + ": it belongs to job \"job-a\", not 'job-b'"));
  auto other_model = id;
  other_model.model = "mlp:4-8-3";
  r = read_checkpoint_file(file, "troupe-test", other_model);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "mlp:4-8-3"));
  auto adam = id;
  adam.optimizer = "adam";
  r = read_checkpoint_file(file, "troupe-test", adam);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "optimizer \"sgd\", not adam"));
  r = read_checkpoint_file(file, "troupe-other", id);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "troupe-other"));
}

BOOST_AUTO_TEST_CASE(a_description_missing_a_field_says_what_the_file_should_be) {
  const nlohmann::json meta = {{"step", "seven"}};
  std::int64_t step = 0;
  auto bad = read_description("/x/state.tf", "a test's state", [&] { step = meta.at("step").get<std::int64_t>(); });
  BOOST_REQUIRE(bad.has_value());
  BOOST_TEST(*bad == "/x/state.tf: its description is not a test's state");
  BOOST_TEST(!read_description("/x/state.tf", "a test's state", [&] { step = 1; }).has_value());
  BOOST_TEST(step == 1);
}
