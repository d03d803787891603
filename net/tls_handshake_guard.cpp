// Keeps TLS handshakes from costing CPU while they wait for a peer, from lasting forever,
// from piling up, and from outliving the connection CAF gave up on. It must be linked
// into each executable that runs nodes: its definitions interpose libssl's SSL_accept,
// SSL_connect and SSL_free and libc's epoll_ctl and epoll_wait. The decisions are
// handshake_ledger's (net/handshake_ledger.hpp).
//
// Note [Idle handshakes]
// CAF 0.17's openssl::session runs the handshake inside read_some and write_some and
// answers "success, 0 bytes" whenever OpenSSL wants to read. A node queues its BASP
// handshake as soon as a connection opens, so the socket is registered for EPOLLOUT; a
// socket is always writable, so epoll_wait returns at once, write_some calls SSL_accept,
// which still wants to read, and the multiplexer spins at 100% of a core for as long as
// any handshake waits for its peer: one half-open connection from anybody was enough,
// and it had no deadline. The guard watches every handshake call. While a handshake waits
// for its peer, its socket's EPOLLOUT interest is withheld from epoll (CAF's own
// bookkeeping is unchanged), and given back as soon as the handshake finishes or wants
// to send, so the connection wakes only when the peer sends. Every handshake has a
// deadline (--tls-handshake-timeout): epoll_wait sleeps no longer than the next one, and
// an expired handshake's socket is shut down, so CAF reads end-of-file and closes it as
// it closes any failed handshake; a handshake call on a condemned socket fails without
// reaching OpenSSL. A new inbound handshake beyond the cap evicts the oldest one whose peer
// has sent nothing yet (the oldest of all when every peer has). Refusals are
// counted (troupe_refusals_total) and logged once per peer address.
//
// Note [Abandoned handshakes]
// CAF closes a connection gracefully: it stops reading and writes out what is queued.
// A TLS connection whose handshake has not finished can write nothing before it reads
// the peer's next handshake message, so it would wait for its deadline, and CAF's
// multiplexer, which ends only once every socket is gone, held its node's exit that long
// (after a job, a connect attempt that BASP's connection timeout dropped mid-handshake
// kept a worker alive up to --tls-handshake-timeout; with no deadline, forever). So when
// CAF stops reading a socket whose handshake is under way, the guard condemns the
// handshake and shuts the socket down at once; CAF sees the hang-up and closes it. The
// peer did nothing wrong, so this is not counted as a refusal.
//
// Note [Certificate roles]
// A certificate of the job's CA proves membership, not what a member may do: a worker's
// certificate presented by a process listening where a shard should be would receive
// gradients and serve parameters. So every certificate carries its role (the subject's
// OU: coordinator, server, worker, or any for one issued to act as every role) and the
// hosts it may serve (subject alternative names), and the side that dials checks both:
// the code that dials declares the host and role it expects (net/peer_expectations.hpp);
// on the first SSL_connect of that connection the guard asks OpenSSL to verify that the
// peer's certificate names the dialled host (an IP address or a DNS name, wildcards only
// as the CA issued them), and when the handshake finishes it refuses a certificate of
// another role. Both refusals fail the handshake, so CAF closes the connection before a
// message crosses it; they are counted (wrong_host, wrong_role) and logged. The side that
// accepts cannot tell in the handshake what the peer will ask for, so the coordinator
// checks at the join: the guard records the certificate of every finished handshake by
// socket (net/peer_certificates.hpp), net/basp_route_guard.cpp records which node each
// socket carries when CAF's BASP learns it, and the coordinator's join gate refuses a
// join whose node came under a certificate of another role (wrong_role) and logs the
// certificate of each node it admits.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "monitoring/refusals.hpp"
#include "net/handshake_ledger.hpp"
#include "net/peer_certificates.hpp"
#include "net/peer_expectations.hpp"
#include "transport/tls.hpp"

namespace {

using troupe::handshake_ledger;
using troupe::monitoring::refusal;
using clock = handshake_ledger::clock;

template <class Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

struct guard {
  std::mutex mutex;  // around every ledger call and the epoll and shutdown calls they lead to
  handshake_ledger ledger{troupe::current_handshake_limits()};
  // Outbound sessions already looked up, with what their peer must be (nullopt: nothing
  // was declared for that address).
  std::map<const SSL*, std::optional<troupe::peer_expectation>> dialled;
};

guard& the_guard() {
  static auto* g = new guard;  // never destroyed: CAF's threads may still run during exit
  return *g;
}

// The numeric address and port of fd's peer; empty and 0 when unknown.
std::pair<std::string, std::uint16_t> peer_endpoint(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    return {text, ntohs(v4.sin_port)};
  }
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    return {text, ntohs(v6.sin6_port)};
  }
  return {};
}

std::string peer_address(int fd) { return peer_endpoint(fd).first; }

// A handshake the guard ended, counted already; `log` when this peer's refusal is news.
struct closed_handshake {
  std::string peer;
  refusal why;
  bool log = false;
};

// Counts the refusal of fd's peer; counted before the socket closes, so whoever sees the
// connection end also sees it in troupe_refusals_total.
closed_handshake refused(int fd, refusal why) {
  closed_handshake c{peer_address(fd), why};
  c.log = troupe::monitoring::count_refusal(why, c.peer);
  return c;
}

// Counts and shuts fd down (the guard holds its lock, so the socket is still this
// handshake's: CAF frees the session, which the guard sees, before it closes the socket).
closed_handshake shut(int fd, refusal why) {
  auto c = refused(fd, why);
  shutdown(fd, SHUT_RDWR);
  return c;
}

void log_refusals(const std::vector<closed_handshake>& closed) {
  const auto limits = troupe::current_handshake_limits();
  for (const auto& c : closed) {
    if (!c.log) continue;
    const std::string who = c.peer.empty() ? "an unknown peer" : c.peer;
    if (c.why == refusal::handshake_cap)
      spdlog::warn("closed a TLS handshake with {}: {} were under way, the most this node allows; further refusals "
                   "of this peer are counted in troupe_refusals_total, not logged",
                   who, limits.max_pending_accepts);
    else
      spdlog::warn("closed a TLS handshake with {} that did not finish within {} ms; further refusals of this peer "
                   "are counted in troupe_refusals_total, not logged",
                   who, limits.deadline.count());
  }
}

handshake_ledger::progress progress_of(SSL* s, int result) {
  if (result == 1) return handshake_ledger::progress::finished;
  switch (SSL_get_error(s, result)) {
    case SSL_ERROR_WANT_READ: return handshake_ledger::progress::waiting_for_peer;
    case SSL_ERROR_WANT_WRITE: return handshake_ledger::progress::waiting_to_send;
    default: return handshake_ledger::progress::failed;
  }
}

// On the first SSL_connect of a session: what its peer must be, and OpenSSL told to verify
// that the peer's certificate names the host dialled. Called under the guard's lock.
void prepare_dial(guard& g, SSL* s, int fd) {
  if (g.dialled.contains(s)) return;
  const auto [ip, port] = peer_endpoint(fd);
  auto expected = ip.empty() ? std::nullopt : troupe::expectation_for(ip, port);
  if (expected) troupe::expect_host(s, expected->host);
  g.dialled.emplace(s, std::move(expected));
}

struct dial_refusal {
  refusal why;
  std::string message;
};

// After SSL_connect on a session with an expectation: a refusal when the certificate does
// not name the host dialled (OpenSSL failed the handshake) or holds another role (the
// handshake finished, and the guard fails it). Called under the guard's lock.
std::optional<dial_refusal> check_dial(guard& g, SSL* s, int result) {
  const auto d = g.dialled.find(s);
  if (d == g.dialled.end() || !d->second) return std::nullopt;
  const troupe::peer_expectation& e = *d->second;
  if (result != 1) {
    const long v = SSL_get_verify_result(s);
    if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
      return dial_refusal{refusal::wrong_host, "refused the " + e.role + " at " + e.host +
                                                   ": its certificate does not name " + e.host};
    return std::nullopt;
  }
  const std::string role = troupe::role_of_certificate(SSL_get0_peer_certificate(s));
  if (role == e.role || role == troupe::any_role) return std::nullopt;
  return dial_refusal{refusal::wrong_role, "refused the " + e.role + " at " + e.host + ": its certificate is for " +
                                               (role.empty() ? std::string("no role") : "the role '" + role + "'") +
                                               ", not '" + e.role + "'"};
}

// The certificate the peer of a finished handshake presented.
troupe::peer_certificate certificate_presented(SSL* s) {
  const X509* cert = SSL_get0_peer_certificate(s);
  if (cert == nullptr) return {};
  char subject[512] = {};
  X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
  return {subject, troupe::role_of_certificate(cert)};
}

// One handshake call (SSL_accept or SSL_connect) under the guard. Also clears OpenSSL's
// error queue first (Note [CAF 0.17 and OpenSSL's error queue]).
int guarded_handshake(SSL* s, bool accepting, int (*call)(SSL*)) {
  static const auto epoll_mod = real<int (*)(int, int, int, epoll_event*)>("epoll_ctl");
  guard& g = the_guard();
  const int fd = SSL_get_fd(s);
  ERR_clear_error();
  std::vector<closed_handshake> closed;
  bool refuse = false;
  {
    std::lock_guard lock(g.mutex);
    g.ledger.set_limits(troupe::current_handshake_limits());
    if (!g.ledger.may_continue(fd, clock::now())) {
      refuse = true;
      if (!g.ledger.condemned(fd)) closed.push_back(refused(fd, refusal::handshake_deadline));
      g.ledger.forget(fd, s);
    } else if (!accepting) {
      prepare_dial(g, s, fd);
    }
  }
  if (refuse) {
    log_refusals(closed);
    ERR_raise(ERR_LIB_SSL, SSL_R_READ_TIMEOUT_EXPIRED);  // SSL_get_error: SSL_ERROR_SSL, so CAF closes
    return -1;
  }
  int result = call(s);
  std::optional<dial_refusal> wrong_peer;
  {
    std::lock_guard lock(g.mutex);
    if (!accepting && (wrong_peer = check_dial(g, s, result))) {
      if (!troupe::monitoring::count_refusal(wrong_peer->why, peer_address(fd))) wrong_peer->message.clear();
      if (result == 1) {
        ERR_raise(ERR_LIB_SSL, SSL_R_CERTIFICATE_VERIFY_FAILED);  // SSL_get_error: SSL_ERROR_SSL, so CAF closes
        result = -1;
      }
    }
    if (result == 1) troupe::record_handshake(fd, certificate_presented(s));
    auto step = g.ledger.on_step(fd, s, accepting, progress_of(s, result), clock::now(),
                                 SSL_get_state(s) != TLS_ST_BEFORE);
    if (step.change) {
      epoll_event e{};
      e.events = step.change->events;
      e.data.u64 = step.change->data;
      epoll_mod(step.change->epfd, EPOLL_CTL_MOD, step.change->fd, &e);
    }
    for (int evicted : step.evicted) closed.push_back(shut(evicted, refusal::handshake_cap));
  }
  if (wrong_peer && !wrong_peer->message.empty())
    spdlog::error("{}; further refusals of this peer are counted in troupe_refusals_total, not logged",
                  wrong_peer->message);
  log_refusals(closed);
  return result;
}

}  // namespace

extern "C" {

int SSL_accept(SSL* s) {
  static const auto fn = real<int (*)(SSL*)>("SSL_accept");
  return guarded_handshake(s, true, fn);
}

int SSL_connect(SSL* s) {
  static const auto fn = real<int (*)(SSL*)>("SSL_connect");
  return guarded_handshake(s, false, fn);
}

void SSL_free(SSL* s) {
  static const auto fn = real<void (*)(SSL*)>("SSL_free");
  if (s != nullptr) {
    guard& g = the_guard();
    std::lock_guard lock(g.mutex);
    g.ledger.forget(SSL_get_fd(s), s);
    g.dialled.erase(s);
    troupe::forget_handshake(SSL_get_fd(s));
  }
  fn(s);
}

int epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  static const auto fn = real<int (*)(int, int, int, epoll_event*)>("epoll_ctl");
  guard& g = the_guard();
  std::lock_guard lock(g.mutex);
  if (op == EPOLL_CTL_DEL || event == nullptr) {
    g.ledger.on_unregister(fd);
    return fn(epfd, op, fd, event);
  }
  epoll_event given = *event;
  const auto r = g.ledger.on_register(epfd, fd, event->events, event->data.u64);
  given.events = r.events;
  const int result = fn(epfd, op, fd, &given);
  const int saved = errno;
  if (result != 0 && op == EPOLL_CTL_ADD && saved != EEXIST) g.ledger.on_unregister(fd);
  if (r.abandoned) shutdown(fd, SHUT_RDWR);  // Note [Abandoned handshakes]: not a refusal of the peer
  errno = saved;
  return result;
}

int epoll_wait(int epfd, epoll_event* events, int max_events, int timeout_ms) {
  static const auto fn = real<int (*)(int, epoll_event*, int, int)>("epoll_wait");
  guard& g = the_guard();
  int timeout = timeout_ms;
  {
    std::lock_guard lock(g.mutex);
    if (const auto left = g.ledger.time_to_next_deadline(clock::now())) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*left).count() + 1;
      const int until_deadline = static_cast<int>(std::min<std::int64_t>(ms, 60'000));
      timeout = timeout_ms < 0 ? until_deadline : std::min(timeout_ms, until_deadline);
    }
  }
  const int result = fn(epfd, events, max_events, timeout);
  const int saved = errno;
  std::vector<closed_handshake> closed;
  {
    std::lock_guard lock(g.mutex);
    for (int fd : g.ledger.take_expired(clock::now())) closed.push_back(shut(fd, refusal::handshake_deadline));
  }
  log_refusals(closed);
  errno = saved;
  return result;
}

}  // extern "C"
