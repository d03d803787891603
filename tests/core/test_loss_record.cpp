// Tests for core/loss_record.cpp (Note [Steps replayed]): which failures lose a node; a
// record reads back exactly; none is none; a damaged record or one of another kind is
// refused by name; one that cannot be written says why; forgetting
// removes it; a record speaks only of its job and of steps its run reached.
#define BOOST_TEST_MODULE loss_record
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "core/loss_record.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

}  // namespace

BOOST_AUTO_TEST_CASE(a_lost_node_is_a_shard_every_worker_a_stage_or_a_stall) {
  for (errc c : {errc::shard_lost, errc::all_workers_lost, errc::stage_lost, errc::stalled})
    BOOST_TEST(is_node_loss(c));
  for (errc c : {errc::diverged, errc::bad_job, errc::bad_shape, errc::checkpoint_failed})
    BOOST_TEST(!is_node_loss(c));
}

BOOST_AUTO_TEST_CASE(a_record_reads_back_and_is_forgotten) {
  test::temp_dir dir("loss-record");
  auto none = read_loss_record(dir.path);
  BOOST_REQUIRE(none.has_value());
  BOOST_TEST(!none->has_value());
  BOOST_TEST(!forget_loss_record(dir.path));  // nothing to forget is not an error

  const loss_record r{"job-a", 57, "shard_lost: shard 1 died at step 57"};
  BOOST_REQUIRE(!write_loss_record(dir.path, r));
  auto back = read_loss_record(dir.path);
  BOOST_REQUIRE(back.has_value());
  BOOST_REQUIRE(back->has_value());
  BOOST_TEST((*back)->job_id == "job-a");
  BOOST_TEST((*back)->reached == 57);
  BOOST_TEST((*back)->why == r.why);
  BOOST_TEST(!forget_loss_record(dir.path));
  BOOST_TEST(!fs::exists(dir.path / loss_record_file));
}

BOOST_AUTO_TEST_CASE(a_damaged_record_or_one_of_another_kind_is_refused_by_name) {
  test::temp_dir dir("loss-record-bad");
  const fs::path file = dir.path / loss_record_file;
  for (const std::string& text : {std::string("{\"kind\": \"troupe-lost-node\", \"job_id\": \"j\""),
                                 std::string("{\"kind\": \"something-else\", \"job_id\": \"j\", "
                                             "\"reached\": 2, \"why\": \"\"}"),
                                 std::string("{\"kind\": \"troupe-lost-node\", \"job_id\": \"j\"}"), std::string("")}) {
    BOOST_TEST_CONTEXT(text) {
      write_text(file, text);
      auto r = read_loss_record(dir.path);
      BOOST_REQUIRE(!r.has_value());
      BOOST_TEST(has(r.error().message, file.string()));
      BOOST_TEST(has(r.error().message, "not a lost-node record"));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_record_that_cannot_be_written_says_why) {
  // The checkpoint directory is a file here (a write that fails as root too); a record
  // that fails leaves the old one whole, as every durable write does (test_durable_file).
  test::temp_dir dir("loss-record-file");
  const fs::path not_a_dir = dir.path / "ck";
  write_text(not_a_dir, "a file");
  const auto why = write_loss_record(not_a_dir, loss_record{"job-a", 4, "y"});
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(has(*why, not_a_dir.string()), *why);
}

BOOST_AUTO_TEST_CASE(a_record_speaks_only_of_its_job_and_the_steps_it_reached) {
  const loss_record r{"job-a", 57, "shard_lost"};
  BOOST_TEST(steps_replayed(r, "job-a", 40).value_or(-1) == 17);
  BOOST_TEST(steps_replayed(r, "job-a", 20).value_or(-1) == 37);  // the newest checkpoint was damaged
  BOOST_TEST(steps_replayed(r, "job-a", 57).value_or(-1) == 0);
  BOOST_TEST(!steps_replayed(r, "job-b", 40).has_value());  // another job's
  BOOST_TEST(!steps_replayed(r, "job-a", 60).has_value());  // a run that had not got that far
}
