// Tests for core/checkpoint_store.cpp (Note [Checkpoint directory]): a committed
// checkpoint is found with its files and meta; one without a manifest (a crash before
// the commit) is ignored and swept; retention keeps the newest K complete ones and never
// removes the last good one before a newer one is whole; a damaged manifest or a damaged
// or missing file makes the search fall back to the previous checkpoint, saying why;
// bad names and missing files are refused at the commit; beginning a step again sweeps
// the temporaries its dead writers left.
#define BOOST_TEST_MODULE checkpoint_store
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "core/checkpoint_store.hpp"
#include "tensor/tensor_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A role's file in checkpoint `step`: a tensor file of kind "test-shard" holding the step.
void write_role_file(const fs::path& dir, const std::string& name, std::int64_t step) {
  tensor t = tensor::uninitialized({4});
  for (int i = 0; i < 4; ++i) t.data<float>()[i] = static_cast<float>(step);
  BOOST_REQUIRE(!write_tensor_file(dir / name, "test-shard", {{"step", step}}, {{"values", t.view()}}));
}

// Checkpoint `step` with shard-0.tf and shard-1.tf, committed unless told not to.
void checkpoint(const checkpoint_store& store, std::int64_t step, bool commit = true) {
  auto d = store.begin(step);
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  write_role_file(*d, "shard-0.tf", step);
  write_role_file(*d, "shard-1.tf", step);
  if (commit) BOOST_REQUIRE(!store.commit(step, {"shard-0.tf", "shard-1.tf"}, {{"epoch", step / 10}}));
}

std::optional<std::string> reads_as_shard(const fs::path& f) {
  auto r = read_tensor_file(f, "test-shard");
  if (!r) return r.error().message;
  return std::nullopt;
}

void flip_a_byte(const fs::path& f, std::size_t at) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  io.get(c);
  io.seekp(static_cast<std::streamoff>(at));
  io.put(static_cast<char>(c ^ 0x20));
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_committed_checkpoint_is_found_and_an_uncommitted_one_ignored) {
  test::temp_dir dir("ckpt");
  checkpoint_store store(dir.path / "ckpts", 2);
  BOOST_TEST(!store.latest_good(reads_as_shard).has_value());  // nothing yet
  checkpoint(store, 10);
  checkpoint(store, 20, false);  // a crash before its manifest
  BOOST_TEST(store.complete() == std::vector<std::int64_t>{10});
  auto found = store.latest_good(reads_as_shard);
  BOOST_REQUIRE_MESSAGE(found.has_value(), (found ? "" : found.error().message));
  BOOST_TEST(found->step == 10);
  BOOST_TEST(found->meta["epoch"] == 1);
  BOOST_TEST(found->files == (std::vector<std::string>{"shard-0.tf", "shard-1.tf"}));
  BOOST_TEST(found->skipped.empty());
  BOOST_TEST(fs::exists(found->dir / "shard-1.tf"));
  checkpoint(store, 30);  // the next commit sweeps the older incomplete one
  BOOST_TEST(!fs::exists(dir.path / "ckpts" / "ckpt-000000000020"));
  BOOST_TEST(store.complete() == (std::vector<std::int64_t>{30, 10}));
}

BOOST_AUTO_TEST_CASE(retention_keeps_the_newest_complete_ones) {
  test::temp_dir dir("ckpt");
  checkpoint_store store(dir.path, 2);
  for (std::int64_t s : {1, 2, 3, 4}) checkpoint(store, s);
  BOOST_TEST(store.complete() == (std::vector<std::int64_t>{4, 3}));
  checkpoint(store, 5, false);  // in the making: 3 and 4 stay until it is whole
  BOOST_TEST(store.complete() == (std::vector<std::int64_t>{4, 3}));
  BOOST_TEST(fs::exists(dir.path / "ckpt-000000000005"));
  BOOST_REQUIRE(!store.commit(5, {"shard-0.tf", "shard-1.tf"}, {}));
  BOOST_TEST(store.complete() == (std::vector<std::int64_t>{5, 4}));
  checkpoint_store one(dir.path, 1);
  checkpoint(one, 6);
  BOOST_TEST(one.complete() == std::vector<std::int64_t>{6});
}

BOOST_AUTO_TEST_CASE(a_damaged_latest_checkpoint_falls_back_to_the_previous_one_saying_why) {
  test::temp_dir dir("ckpt");
  checkpoint_store store(dir.path, 3);
  for (std::int64_t s : {1, 2, 3}) checkpoint(store, s);
  flip_a_byte(dir.path / "ckpt-000000000003" / "shard-1.tf", 20);
  fs::remove(dir.path / "ckpt-000000000002" / "shard-0.tf");
  auto found = store.latest_good(reads_as_shard);
  BOOST_REQUIRE(found.has_value());
  BOOST_TEST(found->step == 1);
  BOOST_REQUIRE(found->skipped.size() == 2u);
  BOOST_TEST(has(found->skipped[0], "checkpoint 3:"), found->skipped[0]);
  BOOST_TEST(has(found->skipped[0], "fails its CRC-32C check"), found->skipped[0]);
  BOOST_TEST(has(found->skipped[1], "checkpoint 2:"), found->skipped[1]);
  BOOST_TEST(has(found->skipped[1], "cannot open"), found->skipped[1]);
  flip_a_byte(dir.path / "ckpt-000000000001" / "MANIFEST.tf", 3);
  auto none = store.latest_good(reads_as_shard);
  BOOST_REQUIRE(!none.has_value());
  BOOST_TEST(has(none.error().message, "no complete checkpoint"), none.error().message);
  BOOST_TEST(has(none.error().message, "checkpoint 1:"), none.error().message);
}

BOOST_AUTO_TEST_CASE(beginning_a_step_again_sweeps_the_temporaries_of_dead_writers) {
  test::temp_dir dir("ckpt-sweep");
  const checkpoint_store store(dir.path, 2);
  auto d = store.begin(40);
  BOOST_REQUIRE(d.has_value());
  // A writer that died before its rename: a child that has exited.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const fs::path left = *d / (".shard-0.tf.tmp-" + std::to_string(dead) + "-0");
  std::ofstream(left) << "torn";
  const fs::path live = *d / (".shard-1.tf.tmp-" + std::to_string(::getpid()) + "-0");
  std::ofstream(live) << "being written";
  BOOST_REQUIRE(store.begin(40).has_value());  // a resumed job reaches step 40 again
  BOOST_TEST(!fs::exists(left));
  BOOST_TEST(fs::exists(live));
}

BOOST_AUTO_TEST_CASE(a_commit_refuses_missing_files_and_names_that_are_not_plain) {
  test::temp_dir dir("ckpt");
  checkpoint_store store(dir.path, 2);
  checkpoint(store, 7, false);
  for (const std::string bad : {"../x", "MANIFEST.tf", "", "sub/file"}) {
    auto why = store.commit(7, {bad}, {});
    BOOST_REQUIRE(why.has_value());
    BOOST_TEST(has(*why, "not a file name it can list"), *why);
  }
  auto why = store.commit(7, {"shard-0.tf", "shard-0.tf"}, {});
  BOOST_REQUIRE(why.has_value());
  why = store.commit(7, {"shard-9.tf"}, {});
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(has(*why, "its file shard-9.tf is missing"), *why);
  BOOST_TEST(store.complete().empty());
  BOOST_TEST(!store.begin(-1).has_value());
  std::ofstream(dir.path / "plain") << "x";
  checkpoint_store under_a_file(dir.path / "plain", 2);
  auto d = under_a_file.begin(1);
  BOOST_REQUIRE(!d.has_value());
  BOOST_TEST(has(d.error().message, "cannot create the checkpoint directory"), d.error().message);
}
