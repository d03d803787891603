// shm_segment: a created segment is private (0600) and seen by a peer that opens it; a
// peer refuses a segment of another job, another user, a wider mode or a forged header;
// the creator's name goes with it; a segment /dev/shm has no room for is refused saying so,
// not left to raise SIGBUS at its first write; the sweep removes what a killed process
// left behind.
#define BOOST_TEST_MODULE shm_segment
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "tests/support/shm_tag.hpp"
#include "transport/shm_segment.hpp"

using namespace troupe;

namespace {

using test::fresh_shm_tag;

bool exists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

// A segment made by hand, as a careless or hostile process of this user could: `name`,
// `mode`, and a header naming `header_tag`.
void forge(const std::string& name, mode_t mode, const std::string& header_tag) {
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(fchmod(fd, mode) == 0);
  BOOST_REQUIRE(ftruncate(fd, 4096) == 0);
  char header[64] = {'T', 'R', 'O', 'U', 'P', 'E', 'S', 'H'};
  const std::uint32_t version = 1;
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 16, header_tag.data(), 16);
  const std::uint64_t bytes = 4096;
  std::memcpy(header + 32, &bytes, 8);
  BOOST_REQUIRE(pwrite(fd, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header));
  close(fd);
}

std::string name_for(const std::string& tag, pid_t pid) { return "/troupe-" + tag + "-" + std::to_string(pid) + "-0-0badcafe"; }

}  // namespace

BOOST_AUTO_TEST_CASE(a_created_segment_is_private_and_shared_with_a_peer) {
  const std::string tag = fresh_shm_tag();
  std::string name;
  {
    auto seg = shm::segment::create(tag, 1 << 16);
    BOOST_REQUIRE_MESSAGE(seg.has_value(), (seg ? std::string() : seg.error().message));
    name = seg->name();
    BOOST_TEST(name.rfind("/troupe-" + tag + "-" + std::to_string(getpid()) + "-", 0) == 0u);
    struct stat st {};
    BOOST_REQUIRE(stat(("/dev/shm" + name).c_str(), &st) == 0);
    BOOST_TEST((st.st_mode & 0777) == 0600u);
    BOOST_TEST(seg->size() == std::size_t{1} << 16);

    auto peer = shm::segment::open(name, tag);
    BOOST_REQUIRE_MESSAGE(peer.has_value(), (peer ? std::string() : peer.error().message));
    BOOST_TEST(peer->size() == seg->size());
    std::memcpy(seg->data() + 100, "hello", 5);
    BOOST_TEST(std::memcmp(peer->data() + 100, "hello", 5) == 0);  // one memory, two mappings
  }
  BOOST_TEST(!exists(name));  // the creator removed its name
}

BOOST_AUTO_TEST_CASE(unlink_removes_the_name_and_keeps_the_mapping) {
  const std::string tag = fresh_shm_tag();
  auto seg = shm::segment::create(tag, 4096);
  BOOST_REQUIRE(seg.has_value());
  auto peer = shm::segment::open(seg->name(), tag);
  BOOST_REQUIRE(peer.has_value());
  seg->unlink();
  BOOST_TEST(!exists(seg->name()));
  seg->data()[200] = std::byte{42};
  BOOST_TEST(static_cast<int>(peer->data()[200]) == 42);
  BOOST_TEST(!shm::segment::open(seg->name(), tag).has_value());  // nobody new can open it
}

BOOST_AUTO_TEST_CASE(a_segment_without_room_is_refused_at_creation) {
  const std::string tag = test::fresh_shm_tag();
  // Far past any tmpfs here: ftruncate alone would take it, and the first write past the
  // room would raise SIGBUS.
  auto s = shm::segment::create(tag, std::size_t{1} << 50, 1);
  BOOST_REQUIRE(!s.has_value());
  BOOST_TEST(s.error().message.find("/dev/shm full") != std::string::npos);
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    BOOST_TEST(e.path().filename().string().find(tag) == std::string::npos);  // nothing left behind
}

BOOST_AUTO_TEST_CASE(a_peer_refuses_what_is_not_the_jobs) {
  const std::string tag = fresh_shm_tag(), other = fresh_shm_tag();
  auto mine = shm::segment::create(tag, 4096);
  BOOST_REQUIRE(mine.has_value());

  // Another job's name, even for a segment that exists.
  auto theirs = shm::segment::create(other, 4096);
  BOOST_REQUIRE(theirs.has_value());
  auto r = shm::segment::open(theirs->name(), tag);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(r.error().message.find("not one of this job's") != std::string::npos, r.error().message);

  // Names that are not segment names at all.
  for (const char* bad : {"/etc/passwd", "/troupe-", "../troupe", ""}) {
    auto b = shm::segment::open(bad, tag);
    BOOST_TEST(!b.has_value(), bad);
  }

  // Another user's: the owner it must have is this process's user.
  auto foreign = shm::segment::open(mine->name(), tag, geteuid() + 1);
  BOOST_REQUIRE(!foreign.has_value());
  BOOST_TEST(foreign.error().message.find("belongs to user") != std::string::npos, foreign.error().message);

  // The job's name but a mode that lets others in.
  const std::string wide = name_for(tag, 999999);
  forge(wide, 0644, tag);
  auto w = shm::segment::open(wide, tag);
  BOOST_REQUIRE(!w.has_value());
  BOOST_TEST(w.error().message.find("mode") != std::string::npos, w.error().message);
  shm_unlink(wide.c_str());

  // The job's name but another job's header.
  const std::string forged = name_for(tag, 999998);
  forge(forged, 0600, other);
  auto f = shm::segment::open(forged, tag);
  BOOST_REQUIRE(!f.has_value());
  BOOST_TEST(f.error().message.find("another job") != std::string::npos, f.error().message);
  shm_unlink(forged.c_str());

  // A name of the job that nothing holds.
  auto missing = shm::segment::open(name_for(tag, 999997), tag);
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message.find("cannot open") != std::string::npos, missing.error().message);

  BOOST_TEST(!shm::segment::create("not-a-tag", 4096).has_value());
}

BOOST_AUTO_TEST_CASE(the_sweep_removes_what_a_killed_process_left) {
  const std::string tag = fresh_shm_tag();
  int pipefd[2];
  BOOST_REQUIRE(pipe(pipefd) == 0);
  const pid_t child = fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    auto seg = shm::segment::create(tag, 4096);
    char ok = seg.has_value() ? 1 : 0;
    (void)!write(pipefd[1], &ok, 1);
    pause();  // killed below, before it can remove anything
    _exit(0);
  }
  close(pipefd[1]);
  char ok = 0;
  BOOST_REQUIRE(read(pipefd[0], &ok, 1) == 1);
  close(pipefd[0]);
  BOOST_REQUIRE(ok == 1);
  const std::string prefix = "troupe-" + tag + "-" + std::to_string(child) + "-";
  auto left = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
    return n;
  };
  BOOST_TEST(left() == 1);
  BOOST_TEST(shm::sweep(tag) == 0u);  // its creator still runs
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  BOOST_TEST(left() == 1);  // a killed process removes nothing itself

  auto live = shm::segment::create(tag, 4096);  // this process's: kept
  BOOST_REQUIRE(live.has_value());
  BOOST_TEST(shm::sweep(tag) == 1u);
  BOOST_TEST(left() == 0);
  BOOST_TEST(exists(live->name()));
  BOOST_TEST(shm::sweep(fresh_shm_tag()) == 0u);
}
