// lane_stream: a bulk lane connection over a non-blocking socket, plain or TLS.
#include "transport/lane_stream.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

namespace troupe::lane {

namespace {

std::string os_error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void make_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int poll_ms(io_limit limit) {
  std::optional<std::int64_t> ms;
  if (limit.deadline) ms = std::chrono::ceil<std::chrono::milliseconds>(*limit.deadline - steady::now()).count();
  if (limit.idle) ms = std::min(ms.value_or(INT_MAX), static_cast<std::int64_t>(limit.idle->count()));
  return ms ? static_cast<int>(std::clamp<std::int64_t>(*ms, 0, INT_MAX)) : -1;
}

}  // namespace

std::string peer_address_of(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in&>(a).sin_addr, text, sizeof text);
  if (a.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6&>(a).sin6_addr, text, sizeof text);
  return text;
}

lane_stream::lane_stream(lane_stream&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      ssl_(std::exchange(o.ssl_, nullptr)),
      sealed_(std::move(o.sealed_)),
      unit_(std::move(o.unit_)),
      peer_(std::move(o.peer_)) {}

lane_stream& lane_stream::operator=(lane_stream&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    ssl_ = std::exchange(o.ssl_, nullptr);
    sealed_ = std::move(o.sealed_);
    unit_ = std::move(o.unit_);
    peer_ = std::move(o.peer_);
  }
  return *this;
}

lane_stream::~lane_stream() { reset(); }

void lane_stream::reset() {
  if (ssl_) SSL_free(ssl_);
  if (fd_ >= 0) ::close(fd_);
  ssl_ = nullptr;
  fd_ = -1;
}

void lane_stream::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::optional<std::string> lane_stream::wait(short events, io_limit limit) {
  pollfd p{fd_, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, poll_ms(limit));
    if (r > 0) return std::nullopt;  // ready, or an error or hang-up the next call reports
    if (r == 0)
      return limit.deadline && steady::now() >= *limit.deadline
                 ? std::string("not done before the deadline")
                 : "no progress for " + std::to_string(limit.idle ? limit.idle->count() : 0) + " ms";
    if (errno != EINTR) return os_error("poll");
  }
}

expected<lane_stream> lane_stream::dial(const std::string& host, std::uint16_t port, const tls_context& tls,
                                        const std::string& role, steady::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0)
    return failure{"cannot resolve " + host + ": " + ::gai_strerror(e)};
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = os_error("socket");
      continue;
    }
    make_nonblocking(fd);
    lane_stream s(fd, host);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = os_error("connect");
      continue;
    }
    if (auto e = s.wait(POLLOUT, {deadline, {}})) {
      why = "connect: " + *e;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      why = std::string("connect: ") + std::strerror(err);
      continue;
    }
    ::freeaddrinfo(found);
    if (!tls) return s;
    s.ssl_ = SSL_new(tls.get());
    if (!s.ssl_ || SSL_set_fd(s.ssl_, fd) != 1) return failure{"cannot start TLS: " + tls_error_text()};
    expect_host(s.ssl_, host);
    if (auto e = s.handshake(false, deadline)) return failure{"TLS with " + host + ": " + *e};
    const std::string got = s.peer_role();
    if (got != role && got != any_role)
      return failure{"the peer at " + host + " presented a certificate for " +
                     (got.empty() ? std::string("no role") : "the role '" + got + "'") + ", not '" + role + "'"};
    return s;
  }
  ::freeaddrinfo(found);
  return failure{"cannot reach " + host + ":" + std::to_string(port) + ": " + why};
}

lane_stream lane_stream::adopt(int fd) {
  make_nonblocking(fd);
  return lane_stream(fd, peer_address_of(fd));
}

std::optional<std::string> lane_stream::accept_tls(const tls_context& tls, steady::time_point deadline) {
  if (!tls) return std::nullopt;
  ssl_ = SSL_new(tls.get());
  if (!ssl_ || SSL_set_fd(ssl_, fd_) != 1) return "cannot start TLS: " + tls_error_text();
  return handshake(true, deadline);
}

// SSL_do_handshake, not SSL_accept or SSL_connect: a node's transport guard interposes
// those for CAF's connections (Note [Idle handshakes]); a lane keeps its own deadline.
std::optional<std::string> lane_stream::handshake(bool accepting, steady::time_point deadline) {
  if (accepting)
    SSL_set_accept_state(ssl_);
  else
    SSL_set_connect_state(ssl_);
  for (;;) {
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) return std::nullopt;
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ:
        if (auto e = wait(POLLIN, {deadline, {}})) return e;
        break;
      case SSL_ERROR_WANT_WRITE:
        if (auto e = wait(POLLOUT, {deadline, {}})) return e;
        break;
      default: {
        const long v = SSL_get_verify_result(ssl_);
        if (v != X509_V_OK) return std::string("the peer's certificate: ") + X509_verify_cert_error_string(v);
        return "the handshake failed: " + tls_error_text();
      }
    }
  }
}

std::string lane_stream::peer_role() const {
  return ssl_ ? role_of_certificate(SSL_get0_peer_certificate(ssl_)) : std::string();
}

std::optional<std::string> lane_stream::seal(bool dialled) {
  if (!ssl_) return std::nullopt;
  auto keys = sealer::for_session(ssl_, dialled);
  if (!keys) return keys.error().message;
  sealed_ = std::make_unique<sealer>(std::move(*keys));
  return std::nullopt;
}

std::optional<std::string> lane_stream::read(void* into, std::size_t n, io_limit limit) {
  if (!sealed_) return ssl_ ? tls_read(into, n, limit) : raw_read(into, n, limit);
  auto* p = static_cast<std::uint8_t*>(into);
  for (std::size_t got = 0; got < n;) {
    const std::size_t u = std::min(seal_unit, n - got);
    std::uint8_t tag[seal_tag];
    if (auto e = raw_read(p + got, u, limit)) return e;
    if (auto e = raw_read(tag, seal_tag, limit)) return e;
    if (!sealed_->open(p + got, u, tag))
      return std::string("a sealed unit failed its integrity check (altered, replayed or out of order)");
    got += u;
  }
  return std::nullopt;
}

std::optional<std::string> lane_stream::write(const void* from, std::size_t n, io_limit limit) {
  if (!sealed_) return ssl_ ? tls_write(from, n, limit) : raw_write(from, n, limit);
  const auto* p = static_cast<const std::uint8_t*>(from);
  for (std::size_t sent = 0; sent < n;) {
    const std::size_t u = std::min(seal_unit, n - sent);
    unit_.resize(u + seal_tag);
    sealed_->seal(p + sent, u, unit_.data());
    if (auto e = raw_write(unit_.data(), unit_.size(), limit)) return e;
    sent += u;
  }
  return std::nullopt;
}

std::optional<std::string> lane_stream::raw_read(void* into, std::size_t n, io_limit limit) {
  auto* p = static_cast<char*>(into);
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::recv(fd_, p + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) return std::string("closed by the peer");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return os_error("recv");
    if (auto e = wait(POLLIN, limit)) return e;
  }
  return std::nullopt;
}

std::optional<std::string> lane_stream::raw_write(const void* from, std::size_t n, io_limit limit) {
  const auto* p = static_cast<const char*>(from);
  for (std::size_t sent = 0; sent < n;) {
    const ssize_t r = ::send(fd_, p + sent, n - sent, MSG_NOSIGNAL);
    if (r > 0) {
      sent += static_cast<std::size_t>(r);
      continue;
    }
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return errno == EPIPE || errno == ECONNRESET ? std::string("closed by the peer") : os_error("send");
    if (auto e = wait(POLLOUT, limit)) return e;
  }
  return std::nullopt;
}

std::optional<std::string> lane_stream::tls_read(void* into, std::size_t n, io_limit limit) {
  auto* p = static_cast<char*>(into);
  for (std::size_t got = 0; got < n;) {
    ERR_clear_error();
    const int r = SSL_read(ssl_, p + got, static_cast<int>(std::min<std::size_t>(n - got, INT_MAX)));
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    const int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_ZERO_RETURN) return std::string("closed by the peer");
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
      return e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 ? std::string("closed by the peer")
                                                            : "TLS: " + tls_error_text();
    if (auto w = wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, limit)) return w;
  }
  return std::nullopt;
}

std::optional<std::string> lane_stream::tls_write(const void* from, std::size_t n, io_limit limit) {
  const auto* p = static_cast<const char*>(from);
  for (std::size_t sent = 0; sent < n;) {
    ERR_clear_error();
    const int r = SSL_write(ssl_, p + sent, static_cast<int>(std::min<std::size_t>(n - sent, INT_MAX)));
    if (r > 0) {
      sent += static_cast<std::size_t>(r);
      continue;
    }
    const int e = SSL_get_error(ssl_, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
      return e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 ? std::string("closed by the peer")
                                                            : "TLS: " + tls_error_text();
    if (auto w = wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, limit)) return w;
  }
  return std::nullopt;
}

}  // namespace troupe::lane
