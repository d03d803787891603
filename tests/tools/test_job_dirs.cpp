// Tests for tools/job_dirs.cpp: a launcher's job directory is private and marked as its
// own; a later launcher removes the directories of launchers that are gone (dead, or whose
// process id now names another process) and leaves live ones, unmarked ones and others'.
#define BOOST_TEST_MODULE job_dirs
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.hpp"
#include "tools/job_dirs.hpp"

using namespace troupe;
using namespace troupe::cli;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(a_job_directory_is_private_and_survives_while_its_launcher_lives) {
  test::temp_dir base("job-dirs-live");
  auto dir = make_job_dir(base.path.string(), "job-abc");
  BOOST_REQUIRE(dir.has_value());
  BOOST_TEST(fs::path(*dir).filename().string().rfind("troupe-job-abc-", 0) == 0u);
  struct stat st {};
  BOOST_REQUIRE(::stat(dir->c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0700u);
  BOOST_TEST(sweep_job_dirs(base.path.string()).empty());
  BOOST_TEST(fs::exists(*dir));
}

BOOST_AUTO_TEST_CASE(directories_of_gone_launchers_are_removed_and_nothing_else) {
  test::temp_dir base("job-dirs-gone");
  const std::string b = base.path.string();
  // A launcher that made its directory and died (killed: it never removed it).
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    auto d = make_job_dir(b, "job-dead");
    ::_exit(d ? 0 : 1);
  }
  int status = 0;
  ::waitpid(launcher, &status, 0);
  BOOST_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // A launcher whose process id now names another process: this one, started later.
  const fs::path reused = base.path / "troupe-job-reused-AAAAAA";
  fs::create_directories(reused);
  std::ofstream(reused / "launcher.pid") << ::getpid() << " 1\n";
  const fs::path unmarked = base.path / "troupe-job-unmarked-BBBBBB";
  const fs::path other = base.path / "something-else";
  fs::create_directories(unmarked);
  fs::create_directories(other);
  std::ofstream(other / "launcher.pid") << launcher << " 1\n";
  auto live = make_job_dir(b, "job-live");
  BOOST_REQUIRE(live.has_value());

  const auto removed = sweep_job_dirs(b);
  BOOST_TEST(removed.size() == 2u);
  BOOST_TEST(!fs::exists(reused));
  for (const auto& e : fs::directory_iterator(base.path))
    BOOST_TEST(e.path().filename().string().rfind("troupe-job-dead-", 0) != 0u, e.path());
  BOOST_TEST(fs::exists(unmarked));
  BOOST_TEST(fs::exists(other));
  BOOST_TEST(fs::exists(*live));
}
