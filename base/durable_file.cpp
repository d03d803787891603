// durable_file: the temporary, its fsync, the rename and the directory's fsync (Note
// [Durable replace]), and the sweep of temporaries whose writer is gone.
#include "base/durable_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

namespace troupe {

namespace {

std::string os_error(const std::string& what, const std::filesystem::path& p) {
  return "cannot " + what + " " + p.string() + ": " + std::strerror(errno);
}

constexpr const char* tmp_mark = ".tmp-";

std::filesystem::path temporary_for(const std::filesystem::path& path) {
  static std::atomic<unsigned> next{0};
  std::string name(1, '.');  // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "." + string
  name.append(path.filename().string()).append(tmp_mark).append(std::to_string(::getpid()));
  name.append("-").append(std::to_string(next++));
  return path.parent_path() / name;
}

// The writer's pid in a temporary's name ".NAME.tmp-PID-N"; 0 when it is not one.
pid_t writer_of(const std::string& name) {
  if (name.empty() || name[0] != '.') return 0;
  const auto at = name.rfind(tmp_mark);
  if (at == std::string::npos) return 0;
  const std::string rest = name.substr(at + std::strlen(tmp_mark));
  const auto dash = rest.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == rest.size()) return 0;
  for (std::size_t i = 0; i < rest.size(); ++i)
    if (i != dash && (rest[i] < '0' || rest[i] > '9')) return 0;
  try {
    return static_cast<pid_t>(std::stol(rest.substr(0, dash)));
  } catch (const std::exception&) {
    return 0;
  }
}

std::optional<std::string> fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return os_error("open the directory", dir);
  const int r = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (r != 0) return os_error("fsync the directory", dir);
  return std::nullopt;
}

}  // namespace

durable_file::durable_file(std::filesystem::path path, std::filesystem::path tmp, int fd)
    : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}

expected<durable_file> durable_file::create(std::filesystem::path path) {
  if (path.filename().empty()) return failure{"cannot write " + path.string() + ": it names a directory, not a file"};
  if (path.parent_path().empty()) path = std::filesystem::path(".") / path;
  auto tmp = temporary_for(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return failure{os_error("create a file in", path.parent_path())};
  return durable_file(std::move(path), std::move(tmp), fd);
}

durable_file::durable_file(durable_file&& other) noexcept
    : path_(std::move(other.path_)), tmp_(std::move(other.tmp_)), fd_(std::exchange(other.fd_, -1)) {}

durable_file& durable_file::operator=(durable_file&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    tmp_ = std::move(other.tmp_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

durable_file::~durable_file() { discard(); }

void durable_file::discard() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
}

std::optional<std::string> durable_file::write(const void* data, std::size_t n) {
  if (fd_ < 0) return "cannot write " + path_.string() + ": the file was committed or failed already";
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      auto why = os_error("write", path_);
      discard();
      return why;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return std::nullopt;
}

std::optional<std::string> durable_file::commit() {
  if (fd_ < 0) return "cannot commit " + path_.string() + ": the file was committed or failed already";
  if (::fsync(fd_) != 0) {
    auto why = os_error("fsync", path_);
    discard();
    return why;
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    auto why = os_error("close", path_);
    ::unlink(tmp_.c_str());
    return why;
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    auto why = os_error("rename a temporary over", path_);
    ::unlink(tmp_.c_str());
    return why;
  }
  return fsync_directory(path_.parent_path());
}

std::optional<std::string> write_file_durably(const std::filesystem::path& path, const void* data, std::size_t n) {
  auto f = durable_file::create(path);
  if (!f) return f.error().message;
  if (auto e = f->write(data, n)) return e;
  return f->commit();
}

std::size_t sweep_temporaries(const std::filesystem::path& dir) {
  std::size_t removed = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = writer_of(it->path().filename().string());
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its writer may still be at work
    std::error_code gone;
    if (std::filesystem::remove(it->path(), gone)) ++removed;
  }
  return removed;
}

}  // namespace troupe
