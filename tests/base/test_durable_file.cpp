// Tests for base/durable_file.cpp (Note [Durable replace]): a new file and a replaced one
// hold exactly what was written, with mode 0600; a writer dropped before its commit, one
// killed between its write and its rename, and one that fills its size limit (a full
// disk, as RLIMIT_FSIZE makes it) leave the old file as it was; the sweep removes the
// temporaries of dead writers only; a path that cannot be written is named.
#define BOOST_TEST_MODULE durable_file
#include <boost/test/unit_test.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "base/durable_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

std::string contents(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::size_t temporaries_in(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
  return n;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs f in a child process and returns its exit status (-1: it did not exit).
int in_child(const std::function<int()>& f) {
  const pid_t pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(f());
  int status = 0;
  BOOST_REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_new_and_a_replaced_file_hold_what_was_written) {
  test::temp_dir dir("durable");
  const fs::path p = dir.path / "state.bin";
  BOOST_TEST(!write_file_durably(p, "first", 5));
  BOOST_TEST(contents(p) == "first");
  struct stat st {};
  BOOST_REQUIRE(::stat(p.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0600u);
  auto f = durable_file::create(p);
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST(!f->write("sec", 3));
  BOOST_TEST(!f->write("ond", 3));
  BOOST_TEST(contents(p) == "first");  // untouched until the commit
  BOOST_TEST(!f->commit());
  BOOST_TEST(contents(p) == "second");
  BOOST_TEST(temporaries_in(dir.path) == 0u);
  BOOST_TEST(has(*f->write("x", 1), "committed"));  // nothing more after a commit
}

BOOST_AUTO_TEST_CASE(a_writer_dropped_before_its_commit_changes_nothing) {
  test::temp_dir dir("durable");
  const fs::path p = dir.path / "state.bin";
  BOOST_REQUIRE(!write_file_durably(p, "old", 3));
  {
    auto f = durable_file::create(p);
    BOOST_REQUIRE(f.has_value());
    BOOST_TEST(!f->write("new contents", 12));
  }
  BOOST_TEST(contents(p) == "old");
  BOOST_TEST(temporaries_in(dir.path) == 0u);
}

BOOST_AUTO_TEST_CASE(a_writer_killed_before_its_rename_leaves_the_old_file_and_the_sweep_cleans_up) {
  test::temp_dir dir("durable");
  const fs::path p = dir.path / "state.bin";
  BOOST_REQUIRE(!write_file_durably(p, "old", 3));
  const int status = in_child([&] {
    auto f = durable_file::create(p);
    if (!f || f->write("torn", 4)) return 1;
    ::kill(::getpid(), SIGKILL);  // a crash between the write and the rename
    return 2;
  });
  BOOST_TEST(status == -1);
  BOOST_TEST(contents(p) == "old");
  BOOST_TEST(temporaries_in(dir.path) == 1u);
  auto mine = durable_file::create(p);  // a live writer's temporary is not swept
  BOOST_REQUIRE(mine.has_value());
  BOOST_TEST(sweep_temporaries(dir.path) == 1u);
  BOOST_TEST(temporaries_in(dir.path) == 1u);
  BOOST_TEST(!mine->write("new", 3));
  BOOST_TEST(!mine->commit());
  BOOST_TEST(contents(p) == "new");
  BOOST_TEST(temporaries_in(dir.path) == 0u);
  BOOST_TEST(sweep_temporaries(dir.path / "missing") == 0u);
}

BOOST_AUTO_TEST_CASE(a_full_disk_fails_the_write_by_name_and_keeps_the_old_file) {
  test::temp_dir dir("durable");
  const fs::path p = dir.path / "state.bin";
  BOOST_REQUIRE(!write_file_durably(p, "old", 3));
  const fs::path said = dir.path / "said";
  const int status = in_child([&] {
    std::signal(SIGXFSZ, SIG_IGN);  // past the limit, write(2) fails with EFBIG instead
    rlimit limit{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
    const std::vector<char> big(1 << 20, 'x');
    auto why = write_file_durably(p, big.data(), big.size());
    if (!why) return 1;
    std::ofstream(said) << *why;  // under the limit
    return 0;
  });
  BOOST_REQUIRE(status == 0);
  const std::string why = contents(said);
  BOOST_TEST(has(why, "cannot write " + p.string()), why);
  BOOST_TEST(has(why, "File too large"), why);
  BOOST_TEST(contents(p) == "old");
  BOOST_TEST(temporaries_in(dir.path) == 0u);
}

BOOST_AUTO_TEST_CASE(a_path_that_cannot_be_written_is_named) {
  test::temp_dir dir("durable");
  BOOST_REQUIRE(!write_file_durably(dir.path / "plain", "x", 1));
  const auto under_a_file = write_file_durably(dir.path / "plain" / "state.bin", "x", 1);
  BOOST_REQUIRE(under_a_file.has_value());
  BOOST_TEST(has(*under_a_file, (dir.path / "plain").string()), *under_a_file);
  BOOST_TEST(has(*under_a_file, "Not a directory"), *under_a_file);
  const auto missing = write_file_durably(dir.path / "no" / "such" / "state.bin", "x", 1);
  BOOST_REQUIRE(missing.has_value());
  BOOST_TEST(has(*missing, "No such file or directory"), *missing);
  const auto a_dir = durable_file::create(dir.path / "");
  BOOST_REQUIRE(!a_dir.has_value());
  BOOST_TEST(has(a_dir.error().message, "names a directory"), a_dir.error().message);
}
