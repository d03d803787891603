// job_dirs: making, marking and sweeping launch's job directories.
#include "tools/job_dirs.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace troupe::cli {

namespace {

constexpr const char* prefix = "troupe-job-";
constexpr const char* mark_file = "launcher.pid";

// The start time of process `pid` (field 22 of /proc/PID/stat, in clock ticks since
// boot); empty when there is no such process.
std::string start_time_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return {};
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return field;
  return {};
}

}  // namespace

expected<bool> mark_job_dir(const std::string& dir) {
  const pid_t self = ::getpid();
  std::ofstream out(dir + "/" + mark_file);
  out << self << " " << start_time_of(self) << "\n";
  if (!out) return failure{"cannot write " + dir + "/" + mark_file};
  return true;
}

expected<std::string> make_job_dir(const std::string& base, const std::string& job_id) {
  std::string tmpl = (std::filesystem::path(base) / ("troupe-" + job_id + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) return failure{"cannot create a job directory under " + base};
  if (auto ok = mark_job_dir(tmpl); !ok) return ok.error();
  return tmpl;
}

std::vector<std::string> sweep_job_dirs(const std::string& base) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || !e.is_directory(ec)) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0 || st.st_uid != ::getuid() || S_ISLNK(st.st_mode)) continue;
    std::ifstream mark(e.path() / mark_file);
    pid_t pid = 0;
    std::string started;
    if (!(mark >> pid >> started) || pid <= 0) continue;  // not marked: not ours to judge
    if (start_time_of(pid) == started) continue;         // its launcher is alive
    if (std::filesystem::remove_all(e.path(), ec) > 0 && !ec) removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace troupe::cli
