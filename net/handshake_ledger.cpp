// handshake_ledger: pending handshakes, their deadlines and the cap, and the epoll
// interest they may have.
#include "net/handshake_ledger.hpp"

#include <sys/epoll.h>

#include <algorithm>
#include <mutex>

namespace troupe {

namespace {

std::mutex limits_mutex;
handshake_limits limits_now;

}  // namespace

void set_handshake_limits(const handshake_limits& l) {
  std::lock_guard lock(limits_mutex);
  limits_now = l;
}

handshake_limits current_handshake_limits() {
  std::lock_guard lock(limits_mutex);
  return limits_now;
}

std::uint32_t handshake_ledger::to_register(int fd, std::uint32_t wanted) const {
  const auto h = pending_.find(fd);
  if (h != pending_.end() && h->second.waits_for_peer) return wanted & ~std::uint32_t{EPOLLOUT};
  return wanted;
}

handshake_ledger::registered handshake_ledger::on_register(int epfd, int fd, std::uint32_t wanted,
                                                            std::uint64_t data) {
  registered out{to_register(fd, wanted), false};
  registered_[fd] = {epfd, wanted, out.events, data};
  const auto h = pending_.find(fd);
  if (h != pending_.end() && !h->second.condemned && !(wanted & EPOLLIN)) {
    h->second.condemned = true;
    out.abandoned = true;
  }
  return out;
}

void handshake_ledger::on_unregister(int fd) { registered_.erase(fd); }

bool handshake_ledger::may_continue(int fd, clock::time_point now) const {
  const auto h = pending_.find(fd);
  return h == pending_.end() || (!h->second.condemned && now < h->second.deadline);
}

handshake_ledger::step_result handshake_ledger::on_step(int fd, const void* session, bool accepting, progress p,
                                                        clock::time_point now, bool heard) {
  step_result out;
  auto h = pending_.find(fd);
  if (h != pending_.end() && h->second.session != session) {
    pending_.erase(h);
    h = pending_.end();
  }
  if (p == progress::finished || p == progress::failed) {
    if (h != pending_.end()) pending_.erase(h);
  } else {
    if (h == pending_.end()) {
      h = pending_.emplace(fd, handshake{session, accepting, false, false, heard, now, now + limits_.deadline}).first;
      if (accepting && pending_accepts() > limits_.max_pending_accepts) {
        // A real peer sends its first message at once and finishes in milliseconds, so
        // under a flood the silent ones, and among them the oldest, are the least likely
        // to be real.
        auto victim = pending_.end();
        const auto before = [](const handshake& a, const handshake& b) {
          return a.heard != b.heard ? !a.heard : a.started < b.started;
        };
        for (auto i = pending_.begin(); i != pending_.end(); ++i)
          if (i->second.accepting && !i->second.condemned && i->first != fd &&
              (victim == pending_.end() || before(i->second, victim->second)))
            victim = i;
        if (victim != pending_.end()) {
          victim->second.condemned = true;
          out.evicted.push_back(victim->first);
        }
      }
    }
    h->second.waits_for_peer = p == progress::waiting_for_peer;
    h->second.heard = h->second.heard || heard;
  }
  const auto r = registered_.find(fd);
  if (r != registered_.end()) {
    const std::uint32_t now_given = to_register(fd, r->second.wanted);
    if (now_given != r->second.given) {
      r->second.given = now_given;
      out.change = interest{r->second.epfd, fd, now_given, r->second.data};
    }
  }
  return out;
}

void handshake_ledger::forget(int fd, const void* session) {
  const auto h = pending_.find(fd);
  if (h != pending_.end() && h->second.session == session) pending_.erase(h);
}

std::vector<int> handshake_ledger::take_expired(clock::time_point now) {
  std::vector<int> out;
  for (auto& [fd, h] : pending_)
    if (!h.condemned && now >= h.deadline) {
      h.condemned = true;
      out.push_back(fd);
    }
  return out;
}

std::optional<handshake_ledger::clock::duration> handshake_ledger::time_to_next_deadline(clock::time_point now) const {
  std::optional<clock::duration> out;
  for (const auto& [fd, h] : pending_)
    if (!h.condemned) {
      const auto left = std::max(clock::duration::zero(), h.deadline - now);
      if (!out || left < *out) out = left;
    }
  return out;
}

std::size_t handshake_ledger::pending_accepts() const {
  return static_cast<std::size_t>(
      std::count_if(pending_.begin(), pending_.end(), [](const auto& e) { return e.second.accepting && !e.second.condemned; }));
}

bool handshake_ledger::condemned(int fd) const {
  const auto h = pending_.find(fd);
  return h != pending_.end() && h->second.condemned;
}

}  // namespace troupe
