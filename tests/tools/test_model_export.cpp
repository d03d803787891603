// Tests for tools/model_export.cpp: --save-model refuses a directory, a missing directory
// and a file under a file before any training, and leaves nothing behind when it accepts a
// path; a model file's parameters come back for the model they were saved from and are
// refused, naming both, for another model or another input; a job's source names it.
#define BOOST_TEST_MODULE model_export
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "tests/support/models.hpp"
#include "tests/support/temp_dir.hpp"
#include "tools/model_export.hpp"
#include "train/model_file.hpp"

using namespace troupe;
using namespace troupe::cli;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(an_unwritable_path_is_refused_and_a_writable_one_left_untouched) {
  test::temp_dir dir("model-export");
  auto why = save_model_unwritable(dir.path.string());
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(has(*why, "is a directory"), *why);
  why = save_model_unwritable((dir.path / "missing" / "m.troupe").string());
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(has(*why, "--save-model: cannot create a file in"), *why);
  BOOST_TEST(has(*why, "give a file in a writable directory"), *why);
  BOOST_TEST(!save_model_unwritable((dir.path / "m.troupe").string()));
  BOOST_TEST(std::filesystem::is_empty(dir.path));  // the probe leaves nothing
}

BOOST_AUTO_TEST_CASE(a_model_file_fits_its_own_model_only) {
  test::temp_dir dir("model-export");
  const model m = test::build_model("mlp");
  tensor p = tensor::uninitialized({m.num_params()});
  m.init_params(p, 9);
  const std::string path = (dir.path / "m.troupe").string();
  BOOST_REQUIRE(!export_model(path, "mlp", m, p, {}));
  auto back = params_for("--init-from", path, m);
  BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  BOOST_TEST(std::memcmp(back->bytes(), p.bytes(), p.nbytes()) == 0);
  auto other = params_for("--init-from", path, test::build_model("cnn"));
  BOOST_REQUIRE(!other.has_value());
  BOOST_TEST(has(other.error().message, "holds model 'mlp'"), other.error().message);
  BOOST_TEST(has(other.error().message, "pass the --model it was trained with"), other.error().message);
  auto wider = params_for("--init-from", path, test::build_model("mlp:812-64-10", {1, 28, 29}));
  BOOST_REQUIRE(!wider.has_value());
  BOOST_TEST(has(wider.error().message, "inputs of shape"), wider.error().message);
  auto missing = params_for("--init-from", (dir.path / "none.troupe").string(), m);
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(has(missing.error().message, "--init-from: cannot open"), missing.error().message);
}

BOOST_AUTO_TEST_CASE(a_job_s_source_names_it) {
  job_spec job;
  job.job_id = "j-1";
  job.workers = 3;
  job.train.seed = 5;
  job_result r;
  r.mode = "sync";
  r.epochs = 2;
  r.test_accuracy = 0.875;
  const auto s = job_model_source("troupe train", job, r);
  BOOST_TEST(s["command"] == "troupe train");
  BOOST_TEST(s["job_id"] == "j-1");
  BOOST_TEST(s["mode"] == "sync");
  BOOST_TEST(s["workers"] == 3);
  BOOST_TEST(s["epochs"] == 2);
  BOOST_TEST(s["seed"] == 5);
  BOOST_TEST(s["test_accuracy"] == 0.875);
}
