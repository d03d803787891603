// Test helpers for attacking nodes the way a local user could: raw TCP connections, a TLS
// client built directly on OpenSSL (so it can present any certificate, or none), and the
// bytes of a BASP frame header. POSIX, header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace troupe::test {

// A TCP connection to 127.0.0.1:port, or -1.
inline int connect_tcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the peer closes (or resets) the connection within `timeout`; what it sends
// meanwhile is read and dropped.
inline bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
  }
  return false;
}

// The 32-byte header of a BASP direct message (CAF 0.17: operation, two padding bytes,
// flags, payload_len, operation_data, source actor, destination actor; big-endian).
inline std::string basp_header(std::uint32_t payload_len, std::uint64_t dest_actor = 1) {
  std::string h(32, '\0');
  h[0] = 0x02;  // direct_message
  for (int i = 0; i < 4; ++i) h[4 + i] = static_cast<char>(payload_len >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) h[24 + i] = static_cast<char>(dest_actor >> (56 - 8 * i));
  return h;
}

// A TLS connection to 127.0.0.1:port presenting `cert` (a PEM with its key; empty: none)
// and trusting `ca`.
class tls_client {
 public:
  tls_client(int port, const std::string& cert, const std::string& ca) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (!cert.empty()) {
      SSL_CTX_use_certificate_chain_file(ctx_, cert.c_str());
      SSL_CTX_use_PrivateKey_file(ctx_, cert.c_str(), SSL_FILETYPE_PEM);
    }
    SSL_CTX_load_verify_locations(ctx_, ca.c_str(), nullptr);
    fd_ = connect_tcp(port);
    if (fd_ < 0) return;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    connected_ = SSL_connect(ssl_) == 1;
  }
  ~tls_client() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
    SSL_CTX_free(ctx_);
    ERR_clear_error();
  }
  tls_client(const tls_client&) = delete;
  tls_client& operator=(const tls_client&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes) { return connected_ && SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) > 0; }
  // Reads until the server closes the connection (true) or `timeout` passes (false).
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    if (!connected_) return true;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (const auto r = read_before(deadline))
      if (*r <= 0 && SSL_get_error(ssl_, *r) != SSL_ERROR_WANT_READ) return true;
    return false;
  }
  // True when the server sends something (a node's BASP handshake follows the TLS one)
  // within `timeout`.
  bool receives_within(std::chrono::milliseconds timeout) {
    if (!connected_) return false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (const auto r = read_before(deadline)) {
      if (*r > 0) return true;
      if (SSL_get_error(ssl_, *r) != SSL_ERROR_WANT_READ) return false;
    }
    return false;
  }
  // True if the server refused this client: the handshake failed, or (TLS 1.3, where the
  // server checks the client's certificate after the client finished) it closed the
  // connection instead of answering.
  bool refused() {
    if (!connected_) return true;
    send("hello");
    char buf[64];
    return SSL_read(ssl_, buf, sizeof buf) <= 0;
  }

 private:
  // The result of one SSL_read once the socket has something to read; nullopt when
  // `deadline` passes first.
  std::optional<int> read_before(std::chrono::steady_clock::time_point deadline) {
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (SSL_pending(ssl_) == 0 && poll(&p, 1, 20) <= 0) continue;
      return SSL_read(ssl_, buf, sizeof buf);
    }
    return std::nullopt;
  }

  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace troupe::test
