// process_group: fork and exec, a poll loop over every child's pipes, and signal handling.
#include "tools/process_group.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

extern char** environ;

namespace troupe {

namespace {

std::atomic<int> pending_signal{0};

void on_signal(int sig) { pending_signal = sig; }

struct running_child {
  child_spec spec;
  pid_t pid = -1;
  int out = -1, err = -1;
  int held_stdin = -1;  // the write end of a hold_stdin child's stdin
  std::string out_buf, err_buf;
  bool exited = false;
  child_result result;
};

void emit_line(running_child& c, const std::string& line, bool from_stdout, group_result& g) {
  if (from_stdout && c.spec.collect_stdout) {
    g.collected.push_back(line);
    return;
  }
  std::fprintf(stderr, "[%s] %s\n", c.spec.name.c_str(), line.c_str());
}

// Reads what is available; returns false at end of file.
bool pump(running_child& c, int& fd, std::string& buf, bool from_stdout, group_result& g) {
  char tmp[8192];
  const ssize_t n = read(fd, tmp, sizeof tmp);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) {
    if (!buf.empty()) emit_line(c, buf, from_stdout, g);
    buf.clear();
    close(fd);
    fd = -1;
    return false;
  }
  buf.append(tmp, static_cast<size_t>(n));
  for (std::size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
    emit_line(c, buf.substr(0, nl), from_stdout, g);
    buf.erase(0, nl + 1);
  }
  return true;
}

// The child's environment: ours, with `extra` set or replacing what we have.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const bool replaced = std::any_of(extra.begin(), extra.end(), [&](const auto& kv) {
      return entry.size() > kv.first.size() && entry.compare(0, kv.first.size(), kv.first) == 0 &&
             entry[kv.first.size()] == '=';
    });
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

// Starts argv with its stdout and stderr on the given descriptors. The child gets SIGTERM
// when the launcher dies, even by SIGKILL (PR_SET_PDEATHSIG), so no node outlives the
// launcher that started it; -1 when it could not be started (exec's error comes back
// through a close-on-exec pipe, as posix_spawn would report it). Between fork and exec
// the child makes only async-signal-safe calls.
pid_t spawn(const std::vector<std::string>& argv, int in_fd, int out_fd, int err_fd,
            const std::vector<std::pair<std::string, std::string>>& extra_env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment(extra_env);
  std::vector<char*> env;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return -1;
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    int why = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != launcher) {
      why = ECHILD;  // the launcher is gone already
    } else if ((in_fd >= 0 && dup2(in_fd, STDIN_FILENO) < 0) || dup2(out_fd, STDOUT_FILENO) < 0 ||
               dup2(err_fd, STDERR_FILENO) < 0) {
      why = errno;
    } else {
      execvpe(args[0], args.data(), env.data());
      why = errno;
    }
    [[maybe_unused]] auto n = write(report[1], &why, sizeof why);
    _exit(127);
  }
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    return -1;
  }
  int why = 0;
  ssize_t got;
  do got = read(report[0], &why, sizeof why);
  while (got < 0 && errno == EINTR);
  close(report[0]);
  if (got > 0) {  // exec failed: the child is gone
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

void reap(running_child& c) {
  int status = 0;
  if (c.exited || waitpid(c.pid, &status, WNOHANG) != c.pid) return;
  c.exited = true;
  if (c.held_stdin >= 0) close(c.held_stdin);
  c.held_stdin = -1;
  c.result.name = c.spec.name;
  if (WIFEXITED(status)) c.result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) c.result.signal = WTERMSIG(status);
}

// Starts c's command with fresh pipes; on failure c is an exited child with code 127.
void start(running_child& c) {
  const child_spec& s = c.spec;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  int in[2] = {-1, -1};
  if (s.hold_stdin && pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  c.exited = false;
  c.pid = spawn(s.argv, in[0], out[1], err[1], s.env);
  close(out[1]);
  close(err[1]);
  if (in[0] >= 0) close(in[0]);
  c.held_stdin = in[1];
  c.out = out[0];
  c.err = err[0];
  if (c.pid < 0) {
    std::fprintf(stderr, "[launch] cannot start %s (%s)\n", s.name.c_str(), s.argv[0].c_str());
    close(c.out);
    close(c.err);
    c.out = c.err = -1;
    if (c.held_stdin >= 0) close(c.held_stdin);
    c.held_stdin = -1;
    c.exited = true;
    c.result = {s.name, 127, 0, false, c.result.respawned};
  }
}

// Whether c has exited lost while the job runs, with respawns left (child_spec::respawns).
bool respawn_due(const running_child& c, bool leader_gone, bool interrupted) {
  const bool lost = (c.result.signal != 0 && !c.result.stopped) || c.result.exit_code == 255;
  return c.exited && lost && !leader_gone && !interrupted && c.result.respawned < c.spec.respawns;
}

// A child whose respawn is due and whose output is all read: started again.
void maybe_respawn(running_child& c, bool leader_gone, bool interrupted) {
  if (!respawn_due(c, leader_gone, interrupted) || c.out >= 0 || c.err >= 0) return;
  if (c.spec.before_respawn) c.spec.before_respawn(c.spec);
  const int respawned = c.result.respawned + 1;
  std::fprintf(stderr, "[launch] %s was lost (%s %d); starting it again (%d of at most %d)\n", c.spec.name.c_str(),
               c.result.signal != 0 ? "signal" : "exit code", c.result.signal != 0 ? c.result.signal : c.result.exit_code,
               respawned, c.spec.respawns);
  c.result = child_result{};
  c.result.respawned = respawned;
  start(c);
}

}  // namespace

group_result run_process_group(const std::vector<child_spec>& specs, const std::string& leader,
                               std::chrono::milliseconds grace, const std::vector<std::string>& enders) {
  using clock = std::chrono::steady_clock;
  group_result g;
  pending_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::vector<running_child> kids;
  for (const auto& s : specs) {
    running_child c;
    c.spec = s;
    start(c);
    kids.push_back(std::move(c));
  }
  std::optional<clock::time_point> leader_gone;
  int escalation = 0;  // 0: waiting, 1: SIGTERM sent, 2: SIGKILL sent
  for (;;) {
    if (const int sig = pending_signal.exchange(0)) {
      g.interrupted = true;
      for (auto& c : kids)
        if (!c.exited) {
          c.result.stopped = true;
          kill(c.pid, sig);
        }
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, bool>> owners;  // child index, is stdout
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (kids[i].out >= 0) fds.push_back({kids[i].out, POLLIN, 0}), owners.push_back({i, true});
      if (kids[i].err >= 0) fds.push_back({kids[i].err, POLLIN, 0}), owners.push_back({i, false});
    }
    bool all_done = true, enders_gone = !enders.empty();
    for (auto& c : kids) {
      reap(c);
      maybe_respawn(c, leader_gone.has_value(), g.interrupted);
      all_done = all_done && c.exited && c.out < 0 && c.err < 0;
      // A leader to be started again has not ended the job.
      if (c.exited && c.spec.name == leader && !leader_gone && !respawn_due(c, false, g.interrupted))
        leader_gone = clock::now();
      if (!c.exited && std::find(enders.begin(), enders.end(), c.spec.name) != enders.end()) enders_gone = false;
    }
    if (enders_gone && !leader_gone) leader_gone = clock::now();
    if (all_done) break;
    if (leader_gone) {
      const auto waited = clock::now() - *leader_gone;
      const int want = waited > grace + std::chrono::seconds(5) ? 2 : waited > grace ? 1 : 0;
      if (want > escalation) {
        escalation = want;
        for (auto& c : kids)
          if (!c.exited) {
            std::fprintf(stderr, "[launch] %s is still running after the job ended; sending %s\n", c.spec.name.c_str(),
                         want == 1 ? "SIGTERM" : "SIGKILL");
            c.result.stopped = true;
            kill(c.pid, want == 1 ? SIGTERM : SIGKILL);
          }
      }
    }
    if (fds.empty()) {
      usleep(20000);
      continue;
    }
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto& c = kids[owners[k].first];
      if (owners[k].second)
        pump(c, c.out, c.out_buf, true, g);
      else
        pump(c, c.err, c.err_buf, false, g);
    }
  }
  for (auto& c : kids) g.children.push_back(c.result);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  return g;
}

int run_step(const std::string& name, const std::vector<std::string>& argv) {
  auto g = run_process_group({child_spec{name, argv, false, {}}}, name, std::chrono::hours(24));
  return g.children.empty() ? -1 : g.children.front().exit_code;
}

}  // namespace troupe
