// no_leftovers: runs a test and fails it when it leaves a process running. Every CTest
// test goes through it (tests/CMakeLists.txt). It makes itself the child subreaper
// (PR_SET_CHILD_SUBREAPER), so whatever the test starts, however deep and even after
// setsid or a double fork, stays its descendant; when the test has exited it gives the
// rest a few seconds to end, then names each one still running, kills it, and exits 1.
// Otherwise it exits with the test's own status (a signal becomes 128 + its number).
//   usage: no_leftovers COMMAND [ARGS...]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

// The text of a file under /proc, or "" when its process ended meanwhile: libstdc++'s
// filebuf throws when read() fails, and reading a vanished process's file fails (ESRCH).
std::string read_proc_file(const std::filesystem::path& path) {
  try {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure&) {
    return {};
  }
}

// Every process below `root`, from /proc (pid -> parent pid).
std::vector<pid_t> descendants_of(pid_t root) {
  std::map<pid_t, pid_t> parent;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string text = read_proc_file(e.path() / "stat");
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || state == 'Z') continue;
    parent[static_cast<pid_t>(std::stoi(name))] = static_cast<pid_t>(ppid);
  }
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : parent) {
    for (pid_t p = ppid; p > 1; p = parent.count(p) ? parent[p] : 0)
      if (p == root) {
        out.push_back(pid);
        break;
      }
  }
  return out;
}

std::string command_line(pid_t pid) {
  std::string text = read_proc_file("/proc/" + std::to_string(pid) + "/cmdline");
  for (char& c : text)
    if (c == '\0') c = ' ';
  return text.empty() ? "?" : text.substr(0, 200);
}

// Reaps every exited child; true when none is left.
bool reap_all() {
  for (;;) {
    const pid_t p = waitpid(-1, nullptr, WNOHANG);
    if (p > 0) continue;
    return p < 0 && errno == ECHILD;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: no_leftovers COMMAND [ARGS...]\n");
    return 2;
  }
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) std::perror("no_leftovers: PR_SET_CHILD_SUBREAPER");
  const pid_t test = fork();
  if (test < 0) {
    std::perror("no_leftovers: fork");
    return 2;
  }
  if (test == 0) {
    execvp(argv[1], argv + 1);
    std::perror("no_leftovers: exec");
    _exit(127);
  }
  // CTest stops a test that runs past its timeout with SIGTERM/SIGKILL to this process;
  // pass SIGTERM and SIGINT on so the test itself can clean up.
  static pid_t forward_to = 0;
  forward_to = test;
  struct sigaction sa {};
  sa.sa_handler = [](int sig) { kill(forward_to, sig); };
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  int status = 0;
  while (waitpid(test, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!reap_all() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto left = descendants_of(getpid());
  if (left.empty()) return code;
  for (pid_t p : left) std::fprintf(stderr, "no_leftovers: the test left process %d running: %s\n", p, command_line(p).c_str());
  std::fprintf(stderr, "no_leftovers: the test left %zu process%s running 5 s after it ended; killed %s\n", left.size(),
               left.size() == 1 ? "" : "es", left.size() == 1 ? "it" : "them");
  for (pid_t p : left) kill(p, SIGKILL);
  reap_all();
  return 1;
}
