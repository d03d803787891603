// shm_segment: creating, checking, mapping and sweeping a job's shared-memory segments.
#include "transport/shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

namespace troupe::shm {

namespace {

constexpr char magic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'S', 'H'};
constexpr std::uint32_t layout_version = 1;
constexpr std::size_t tag_digits = 16;
constexpr std::size_t max_name = 96;

// The header at offset 0 of every segment.
struct header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t reserved;
  char tag[tag_digits];
  std::uint64_t bytes;
  std::uint64_t label;
};
static_assert(sizeof(header) <= header_bytes);

bool all_of(std::string_view s, const char* allowed) {
  return !s.empty() && s.find_first_not_of(allowed) == std::string_view::npos;
}

// "/troupe-TAG-" : the start of every segment name of the job.
std::string prefix_of(std::string_view tag) { return "/troupe-" + std::string(tag) + "-"; }

// The creator's pid in a name of the job (prefix PID-N-RANDOM); 0 when it is not one.
pid_t creator_of(std::string_view name, std::string_view tag) {
  const std::string prefix = prefix_of(tag);
  if (name.size() > max_name || name.substr(0, prefix.size()) != prefix) return 0;
  std::string_view rest = name.substr(prefix.size());
  const auto d1 = rest.find('-');
  if (d1 == std::string_view::npos) return 0;
  const auto d2 = rest.find('-', d1 + 1);
  if (d2 == std::string_view::npos) return 0;
  const std::string_view pid = rest.substr(0, d1), seq = rest.substr(d1 + 1, d2 - d1 - 1), rnd = rest.substr(d2 + 1);
  if (!all_of(pid, "0123456789") || pid.size() > 9 || !all_of(seq, "0123456789") || seq.size() > 9 ||
      !all_of(rnd, "0123456789abcdef") || rnd.size() != 8)
    return 0;
  return static_cast<pid_t>(std::stol(std::string(pid)));
}

std::string errno_text() { return std::strerror(errno); }

std::string random_hex8() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
  return buf;
}

}  // namespace

bool valid_tag(std::string_view tag) { return tag.size() == tag_digits && all_of(tag, "0123456789abcdef"); }

segment::segment(segment&& o) noexcept
    : name_(std::move(o.name_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      label_(o.label_),
      owner_(std::exchange(o.owner_, false)) {}

segment& segment::operator=(segment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    label_ = o.label_;
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

segment::~segment() { release(); }

void segment::release() {
  if (owner_) unlink();
  if (data_) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void segment::unlink() {
  if (!owner_) return;
  shm_unlink(name_.c_str());
  owner_ = false;
}

expected<segment> segment::create(std::string_view tag, std::size_t bytes, std::uint64_t label) {
  if (!valid_tag(tag)) return failure{"a shared-memory segment needs a job tag of 16 hex digits"};
  if (bytes < header_bytes) bytes = header_bytes;
  static std::atomic<unsigned> counter{0};
  segment s;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    s.name_ = prefix_of(tag) + std::to_string(getpid()) + "-" + std::to_string(counter++ % 1000000000u) + "-" +
              random_hex8();
    fd = shm_open(s.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return failure{"cannot create the shared-memory segment " + s.name_ + ": " + errno_text()};
  // The umask cannot widen 0600, but a restrictive one could narrow it to unusable.
  // Reserved, not only sized: a tmpfs without room for the pages would otherwise raise
  // SIGBUS at the first write past it, where this says why and the caller goes another way.
  int reserved = 0;
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      (reserved = posix_fallocate(fd, 0, static_cast<off_t>(bytes))) != 0) {
    if (reserved != 0) errno = reserved;
    const std::string why = errno_text();
    close(fd);
    shm_unlink(s.name_.c_str());
    return failure{"cannot size the shared-memory segment " + s.name_ + " to " + std::to_string(bytes) +
                   " bytes: " + why + " (is /dev/shm full?)"};
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    const std::string why = errno_text();
    shm_unlink(s.name_.c_str());
    return failure{"cannot map the shared-memory segment " + s.name_ + ": " + why};
  }
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = bytes;
  s.owner_ = true;
  s.label_ = label;
  header h{};
  std::memcpy(h.magic, magic, sizeof magic);
  h.version = layout_version;
  std::memcpy(h.tag, tag.data(), tag_digits);
  h.bytes = bytes;
  h.label = label;
  std::memcpy(s.data_, &h, sizeof h);
  return s;
}

expected<segment> segment::open(std::string_view name, std::string_view tag) { return open(name, tag, geteuid()); }

expected<segment> segment::open(std::string_view name, std::string_view tag, uid_t owner) {
  const std::string shown(name.substr(0, max_name));
  if (!valid_tag(tag) || creator_of(name, tag) == 0)
    return failure{"refused the shared-memory segment '" + shown + "': its name is not one of this job's"};
  const std::string path(name);
  const int fd = shm_open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return failure{"cannot open the shared-memory segment " + path + ": " + errno_text()};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return failure{"cannot inspect the shared-memory segment " + path + ": " + errno_text()};
  }
  std::string refusal;
  if (!S_ISREG(st.st_mode))
    refusal = "it is not a regular shared-memory object";
  else if (st.st_uid != owner)
    refusal = "it belongs to user " + std::to_string(st.st_uid) + ", not to this job's user " + std::to_string(owner);
  else if ((st.st_mode & 077) != 0)
    refusal = "its mode lets other users in (the job's segments are 0600)";
  else if (static_cast<std::size_t>(st.st_size) < header_bytes)
    refusal = "it is smaller than its header";
  if (!refusal.empty()) {
    close(fd);
    return failure{"refused the shared-memory segment " + path + ": " + refusal};
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return failure{"cannot map the shared-memory segment " + path + ": " + errno_text()};
  segment s;
  s.name_ = path;
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = bytes;
  header h{};
  std::memcpy(&h, s.data_, sizeof h);
  if (std::memcmp(h.magic, magic, sizeof magic) != 0 || h.version != layout_version)
    return failure{"refused the shared-memory segment " + path + ": it is not a Troupe segment of this version"};
  if (std::memcmp(h.tag, tag.data(), tag_digits) != 0)
    return failure{"refused the shared-memory segment " + path + ": it belongs to another job"};
  if (h.bytes != bytes) return failure{"refused the shared-memory segment " + path + ": its size changed"};
  s.label_ = h.label;
  return s;
}

std::size_t sweep(std::string_view tag) {
  if (!valid_tag(tag)) return 0;
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  std::size_t removed = 0;
  const uid_t me = geteuid();
  while (dirent* e = readdir(d)) {
    const std::string name = std::string("/") + e->d_name;
    const pid_t pid = creator_of(name, tag);
    if (pid == 0 || pid == getpid()) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to ask about
    struct stat st {};
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != me) continue;
    if (shm_unlink(name.c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace troupe::shm
