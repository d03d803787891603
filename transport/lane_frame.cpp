// lane_frame: encoding and checking the bulk lane's frame headers.
#include "transport/lane_frame.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace troupe::lane {

namespace {

void put(std::byte* at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

std::uint64_t get(const std::byte* at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
  return v;
}

}  // namespace

// Layout: magic u32, version u8, kind u8, dtype u8, direction u8, ticket u64, nbytes u64.
header_bytes_t encode_header(const frame_header& h) {
  header_bytes_t b{};
  put(&b[0], frame_magic, 4);
  put(&b[4], frame_version, 1);
  put(&b[5], static_cast<std::uint8_t>(h.kind), 1);
  put(&b[6], static_cast<std::uint8_t>(h.type), 1);
  put(&b[7], static_cast<std::uint8_t>(h.way), 1);
  put(&b[8], h.ticket, 8);
  put(&b[16], h.nbytes, 8);
  return b;
}

frame_header payload_header(std::uint64_t ticket, dtype t, std::uint64_t nbytes) {
  return {frame_kind::payload, t, direction::to_shard, ticket, nbytes};
}

frame_header hello_header(direction way) { return {frame_kind::hello, dtype::u8, way, 0, token_bytes}; }

frame_header welcome_header() { return {frame_kind::welcome, dtype::u8, direction::to_shard, 0, 0}; }

expected<frame_header> decode_header(const header_bytes_t& b, std::uint64_t max_payload) {
  if (get(&b[0], 4) != frame_magic) return failure{"not a Troupe lane frame (wrong magic number)"};
  if (get(&b[4], 1) != frame_version)
    return failure{"a lane frame of version " + std::to_string(get(&b[4], 1)) + ", this build speaks " +
                   std::to_string(frame_version) + "; run one troupe build on every node"};
  frame_header h;
  const auto kind = get(&b[5], 1);
  if (kind < 1 || kind > 3) return failure{"a lane frame of unknown kind " + std::to_string(kind)};
  h.kind = static_cast<frame_kind>(kind);
  const auto type = dtype_from_byte(static_cast<std::uint8_t>(get(&b[6], 1)));
  if (!type) return failure{"a lane frame of unknown dtype " + std::to_string(get(&b[6], 1))};
  h.type = *type;
  const auto way = get(&b[7], 1);
  if (way > 1) return failure{"a lane frame of unknown direction " + std::to_string(way)};
  h.way = static_cast<direction>(way);
  h.ticket = get(&b[8], 8);
  h.nbytes = get(&b[16], 8);
  switch (h.kind) {
    case frame_kind::hello:
      if (h.nbytes != token_bytes) return failure{"a lane hello of " + std::to_string(h.nbytes) + " bytes, not 32"};
      break;
    case frame_kind::welcome:
      if (h.nbytes != 0) return failure{"a lane welcome that carries " + std::to_string(h.nbytes) + " bytes"};
      break;
    case frame_kind::payload:
      if (h.nbytes == 0) return failure{"an empty lane payload"};
      if (h.nbytes % size_of(h.type) != 0)
        return failure{"a lane payload of " + std::to_string(h.nbytes) + " bytes is not a whole number of " +
                       std::string(name_of(h.type)) + " elements"};
      if (h.nbytes > max_payload)
        return failure{"a lane payload of " + std::to_string(h.nbytes) + " bytes, above this job's bound of " +
                       std::to_string(max_payload)};
      break;
  }
  return h;
}

expected<token> random_token() {
  token t{};
  std::size_t got = 0;
  while (got < t.size()) {
    const ssize_t n = getrandom(t.data() + got, t.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return failure{std::string("cannot draw a lane token from the kernel: ") + std::strerror(errno)};
    }
    got += static_cast<std::size_t>(n);
  }
  return t;
}

bool tokens_equal(const token& a, const token& b) {
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<std::uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace troupe::lane
