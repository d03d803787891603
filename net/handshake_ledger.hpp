// The state behind the TLS handshake guard (Note [Idle handshakes] in
// net/tls_handshake_guard.cpp), free of OpenSSL and epoll so that tests can step it: which
// sockets have a handshake under way and since when, whether each waits for its peer,
// which ones are condemned (past the deadline, over the cap, or abandoned: CAF no longer
// reads them), and what epoll interest CAF asked for on every socket. The
// ledger decides; the guard carries out what it returns. Not thread-safe: the guard holds
// one lock around every call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace troupe {

struct handshake_limits {
  std::chrono::milliseconds deadline{10000};  // a TLS handshake must finish within this
  std::size_t max_pending_accepts = 64;       // inbound handshakes under way at once
};

// The limits every handshake of this process gets from now on; nodes set them from their
// options before their actor system exists. Thread-safe.
void set_handshake_limits(const handshake_limits& l);
handshake_limits current_handshake_limits();

class handshake_ledger {
 public:
  using clock = std::chrono::steady_clock;

  // Where a handshake stands after a call into the TLS library.
  enum class progress : std::uint8_t { waiting_for_peer, waiting_to_send, finished, failed };

  // An epoll registration to change: epoll_ctl(epfd, EPOLL_CTL_MOD, fd, {events, data}).
  struct interest {
    int epfd = -1, fd = -1;
    std::uint32_t events = 0;
    std::uint64_t data = 0;  // epoll_data_t as CAF gave it
  };
  struct step_result {
    std::optional<interest> change;
    std::vector<int> evicted;  // older inbound handshakes to close (over the cap)
  };

  explicit handshake_ledger(handshake_limits limits) : limits_(limits) {}
  void set_limits(const handshake_limits& l) { limits_ = l; }

  // What to do with a registration: the events to give epoll, and whether to shut the
  // socket down because its handshake was just abandoned.
  struct registered {
    std::uint32_t events = 0;
    bool abandoned = false;
  };
  // CAF registers `wanted` events for fd on epfd with `data` (add or modify). The events
  // to register lack EPOLLOUT while the socket's handshake waits for its peer. A handshake
  // whose socket CAF no longer wants to read (it is closing the connection, say after
  // BASP's connection timeout) can never finish, since every handshake has a message
  // left to read: it is condemned at once and reported as abandoned, so the guard shuts
  // the socket down and CAF closes it now rather than at the deadline (Note [Abandoned
  // handshakes] in net/tls_handshake_guard.cpp).
  registered on_register(int epfd, int fd, std::uint32_t wanted, std::uint64_t data);
  void on_unregister(int fd);

  // Before a handshake call on fd: false when the handshake must fail instead (condemned,
  // or past its deadline).
  bool may_continue(int fd, clock::time_point now) const;
  // After a handshake call on fd by `session` (a new session on fd starts a new handshake);
  // `heard` once the peer's first handshake message has arrived. Over the cap, the oldest
  // inbound handshake that has not heard from its peer is evicted, and only when every one
  // has, the oldest of all: a real peer sends its first message at once, so under a flood
  // of silent connections a real handshake is never the one closed.
  step_result on_step(int fd, const void* session, bool accepting, progress p, clock::time_point now,
                      bool heard = false);
  // The session on fd is gone.
  void forget(int fd, const void* session);

  // Handshakes whose deadline passed, condemned now (each once): the guard closes them.
  std::vector<int> take_expired(clock::time_point now);
  // Until the earliest deadline of a handshake not yet condemned; nullopt when none.
  std::optional<clock::duration> time_to_next_deadline(clock::time_point now) const;

  std::size_t pending_accepts() const;
  bool condemned(int fd) const;

 private:
  struct handshake {
    const void* session = nullptr;
    bool accepting = false;
    bool waits_for_peer = false;
    bool condemned = false;
    bool heard = false;
    clock::time_point started, deadline;
  };
  struct registration {
    int epfd = -1;
    std::uint32_t wanted = 0;  // what CAF asked for
    std::uint32_t given = 0;   // what epoll has
    std::uint64_t data = 0;
  };

  std::uint32_t to_register(int fd, std::uint32_t wanted) const;

  handshake_limits limits_;
  std::map<int, handshake> pending_;
  std::map<int, registration> registered_;
};

}  // namespace troupe
