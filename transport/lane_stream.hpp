// lane_stream: one connection of a bulk lane (Note [Bulk lanes] in transport/lane.hpp), plain
// TCP or TLS over a non-blocking socket: dialling and accepting with a deadline, reading
// and writing whole buffers with one, and shutting down from any thread, which wakes a
// read or write under way. A stream is used by one thread at a time (a lane connection
// carries payloads one way, so after its hello only one side writes). A TLS stream seals
// its own units once the hello is done (Note [Sealed lane frames] in transport/lane_seal.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "base/expected.hpp"
#include "transport/lane_seal.hpp"
#include "transport/tls.hpp"

namespace troupe::lane {

using steady = std::chrono::steady_clock;

// How long a read or write may take: until `deadline` in all, and at most `idle` without
// progress; neither set: until the data comes or the stream is shut down.
struct io_limit {
  std::optional<steady::time_point> deadline;
  std::optional<std::chrono::milliseconds> idle;
};
inline constexpr io_limit forever{};

class lane_stream {
 public:
  lane_stream() = default;
  lane_stream(lane_stream&& o) noexcept;
  lane_stream& operator=(lane_stream&& o) noexcept;
  lane_stream(const lane_stream&) = delete;
  lane_stream& operator=(const lane_stream&) = delete;
  ~lane_stream();

  // Connects to host:port; with `tls`, as a client that requires the peer's certificate to
  // name `host` and carry `role` (or "any"). All before `deadline`.
  static expected<lane_stream> dial(const std::string& host, std::uint16_t port, const tls_context& tls,
                                    const std::string& role, steady::time_point deadline);
  // Takes an accepted socket (closed with the stream).
  static lane_stream adopt(int fd);
  // With `tls`, the server's side of the handshake before `deadline`; without, nothing.
  std::optional<std::string> accept_tls(const tls_context& tls, steady::time_point deadline);

  // Reads exactly n bytes; a failure says why (the peer closed, the deadline passed, a
  // TLS or socket error, shut down).
  std::optional<std::string> read(void* into, std::size_t n, io_limit limit);
  std::optional<std::string> write(const void* from, std::size_t n, io_limit limit);
  // Any thread: the stream's reads and writes fail from now on, including one under way.
  void shutdown();
  // TLS, once the hello and welcome are done: from now on reads and writes are sealed
  // units (Note [Sealed lane frames]). `dialled`: this side connected. Plain: nothing.
  std::optional<std::string> seal(bool dialled);

  // The peer's role from its certificate (empty without TLS, or when it names none).
  std::string peer_role() const;
  // The peer's address, for logs and refusals.
  const std::string& peer() const { return peer_; }
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  lane_stream(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  std::optional<std::string> wait(short events, io_limit limit);
  std::optional<std::string> handshake(bool accepting, steady::time_point deadline);
  // The socket's bytes as they are (plain, and sealed units).
  std::optional<std::string> raw_read(void* into, std::size_t n, io_limit limit);
  std::optional<std::string> raw_write(const void* from, std::size_t n, io_limit limit);
  // TLS records (the handshake's hello and welcome).
  std::optional<std::string> tls_read(void* into, std::size_t n, io_limit limit);
  std::optional<std::string> tls_write(const void* from, std::size_t n, io_limit limit);
  void reset();

  int fd_ = -1;
  ssl_st* ssl_ = nullptr;
  std::unique_ptr<sealer> sealed_;
  std::vector<std::uint8_t> unit_;  // a sealed unit on its way out
  std::string peer_;
};

// The numeric address of a connected socket's peer ("" when unknown).
std::string peer_address_of(int fd);

}  // namespace troupe::lane
