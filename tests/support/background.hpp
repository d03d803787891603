// A child process running in the background for multi-process tests: stdout and stderr
// go to files the test can read while it runs; wait() has a deadline; state() says how it
// ended or where it waits; a server started on port 0 tells its port through
// wait_for_port; the destructor kills what is still running. child_with finds a process a
// launch started.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace troupe::test {

class background_process {
 public:
  background_process(const std::vector<std::string>& argv, const std::string& log_stem) {
    out_path_ = log_stem + ".out";
    err_path_ = log_stem + ".err";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~background_process() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      int st;
      waitpid(pid_, &st, 0);
    }
  }
  background_process(const background_process&) = delete;
  background_process& operator=(const background_process&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Resident memory in MiB (0 once it has exited).
  long rss_mib() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) / 1024;
    return 0;
  }
  // User and system CPU seconds it has used so far (0 once it has exited).
  double cpu_seconds() const {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    if (close == std::string::npos) return 0.0;
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    long ticks = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i)
      if (i == 14 || i == 15) ticks += std::stol(field);  // utime, stime
    return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  bool running() {
    poll();
    return pid_ > 0 && !exited_;
  }
  void signal(int sig) {
    if (running()) ::kill(pid_, sig);
  }
  // The exit code, or -1 if it died by a signal; nullopt if it is still running at the deadline.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!running()) return code_;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return running() ? std::nullopt : std::optional<int>(code_);
  }
  // What became of it, for a failure's message: its exit code or signal, or, while it
  // runs, its state, its threads and where the kernel has its main thread waiting.
  std::string state() {
    if (pid_ <= 0) return "never started";
    if (!running())
      return signal_ ? "killed by signal " + std::to_string(signal_) : "exited with code " + std::to_string(code_);
    const std::string proc = "/proc/" + std::to_string(pid_);
    std::string state = "?", threads = "?";
    std::ifstream status(proc + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("State:", 0) == 0) state = line.substr(7);
      if (line.rfind("Threads:", 0) == 0) threads = line.substr(9);
    }
    return "running (pid " + std::to_string(pid_) + ", " + state + ", " + threads + " threads, waiting in " +
           slurp(proc + "/wchan") + ", " + std::to_string(cpu_seconds()) + " CPU s)";
  }
  std::string out() const { return slurp(out_path_); }
  std::string err() const { return slurp(err_path_); }
  // For a server started on port 0 that says where it listens: waits until stderr has
  // `prefix` followed by HOST:PORT and returns PORT; nullopt at the deadline or when the
  // process exits first.
  std::optional<int> wait_for_port(const std::string& prefix, std::chrono::milliseconds timeout) {
    const std::regex pattern(std::regex_replace(prefix, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                             R"(\[?[0-9a-fA-F.:]*\]?:([0-9]+))");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::smatch m;
      const std::string text = err();
      if (std::regex_search(text, m, pattern)) return std::stoi(m[1].str());
      if (!running() || std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Waits until stderr contains `text`; false at the deadline or if the process exits first.
  bool wait_for_err(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (err().find(text) != std::string::npos) return true;
      if (!running()) return err().find(text) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  void poll() {
    if (pid_ <= 0 || exited_) return;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      exited_ = true;
      code_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      signal_ = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    }
  }
  static std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
  int signal_ = 0;
  std::string out_path_, err_path_;
};

// The pid of a live process whose parent is `parent` and whose command line holds `word`
// (a node that `troupe launch` started, by its flags); 0 when there is none.
inline pid_t child_with(pid_t parent, const std::string& word) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = all.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(all.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    if (!(rest >> state >> ppid) || ppid != parent) continue;
    std::ifstream cmd(e.path() / "cmdline");
    std::string line((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    std::replace(line.begin(), line.end(), '\0', ' ');
    if (line.find(word) != std::string::npos) return std::stoi(pid);
  }
  return 0;
}

}  // namespace troupe::test
