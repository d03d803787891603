// Tests for tools/cmd_export.cpp through the troupe binary: the model of a sync job's last
// checkpoint, exported, holds exactly the parameters --save-model wrote at its end, in
// Troupe's format and as .npz; a directory without checkpoints and a file that cannot be
// written are refused with exit code 1 and a message naming them.
#define BOOST_TEST_MODULE cmd_export
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "tests/support/numeric.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "train/model_file.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

process_result troupe_run(std::vector<std::string> args) {
  args.insert(args.begin(), troupe_bin());
  auto r = run_process(args, 120s);
  BOOST_REQUIRE_MESSAGE(!r.timed_out, "troupe did not finish in time");
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_last_checkpoints_model_is_the_final_model) {
  temp_dir tmp("cmd-export");
  const std::string ck = tmp.file("ck"), final_model = tmp.file("final.troupe"), exported = tmp.file("m.troupe");
  auto r = troupe_run({"train", "--mode", "sync", "--dataset", "synthetic", "--train-samples", "3000", "--epochs", "1",
                       "--metrics", "off", "--checkpoint-dir", ck, "--save-model", final_model});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = troupe_run({"export", ck, exported});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto line = nlohmann::json::parse(r.out);
  BOOST_TEST(line["step"] == 12);  // 1500 samples per worker in batches of 128: the epoch's end
  BOOST_TEST(line["model"] == "mlp");
  auto a = load_model(final_model), b = load_model(exported);
  BOOST_REQUIRE(a.has_value());
  BOOST_REQUIRE_MESSAGE(b.has_value(), (b ? "" : b.error().message));
  BOOST_TEST(same_bits(a->params, b->params));
  BOOST_TEST(b->source["command"] == "troupe export");
  BOOST_TEST(b->source["step"] == 12);
  r = troupe_run({"export", ck, tmp.file("m.npz")});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::ifstream npz(tmp.file("m.npz"), std::ios::binary);
  char magic[2] = {};
  npz.read(magic, 2);
  BOOST_TEST((magic[0] == 'P' && magic[1] == 'K'));
}

BOOST_AUTO_TEST_CASE(no_checkpoint_or_an_unwritable_file_is_refused_by_name) {
  temp_dir tmp("cmd-export-refused");
  auto r = troupe_run({"export", tmp.file("nothing"), tmp.file("m.troupe")});
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(has(r.err, "no complete checkpoint"), r.err);
  BOOST_TEST(r.out.empty());
  const std::string ck = tmp.file("ck");
  r = troupe_run({"train", "--dataset", "synthetic", "--train-samples", "1000", "--epochs", "1", "--metrics", "off",
                  "--checkpoint-dir", ck});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  r = troupe_run({"export", ck, tmp.file("no-such-dir/m.troupe")});
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(has(r.err, "no-such-dir"), r.err);
  r = troupe_run({"export", ck});
  BOOST_TEST(r.exit_code == 2);  // the file is required
}
