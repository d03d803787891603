// lane_frame: the wire format of a bulk lane connection (Note [Bulk lanes] in
// transport/lane.hpp): a fixed 24-byte header, then the frame's bytes. Three kinds: a hello
// (member -> shard: the one-time token the shard offered over the actor channel, and
// which way the connection carries payloads), the shard's welcome, and a payload (a
// tensor's raw bytes, named by its ticket). decode_header checks every field, and the
// payload's length against a bound, before anyone allocates. Free of sockets: the
// transport (transport/lane_transport.cpp) reads and writes what this encodes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/expected.hpp"
#include "tensor/dtype.hpp"

namespace troupe::lane {

inline constexpr std::uint32_t frame_magic = 0x4c505254;  // "TRPL", little-endian on the wire
inline constexpr std::uint8_t frame_version = 1;
inline constexpr std::size_t header_bytes = 24;
inline constexpr std::size_t token_bytes = 32;

enum class frame_kind : std::uint8_t { hello = 1, welcome = 2, payload = 3 };

// Which way a connection carries payloads once the shard welcomed it.
enum class direction : std::uint8_t {
  to_shard = 0,   // gradients: the member writes, the shard reads
  to_member = 1,  // pull answers: the shard writes, the member reads
};

using token = std::array<std::uint8_t, token_bytes>;

struct frame_header {
  frame_kind kind = frame_kind::payload;
  dtype type = dtype::f32;            // payload
  direction way = direction::to_shard;  // hello
  std::uint64_t ticket = 0;           // payload: the ticket its message names
  std::uint64_t nbytes = 0;           // bytes after the header
};

using header_bytes_t = std::array<std::byte, header_bytes>;

header_bytes_t encode_header(const frame_header& h);
frame_header payload_header(std::uint64_t ticket, dtype t, std::uint64_t nbytes);
frame_header hello_header(direction way);
frame_header welcome_header();

// The header in `bytes`, or what is wrong with it: not a lane frame, another version, an
// unknown kind or dtype, a hello or welcome of the wrong length, a payload that is empty,
// not a whole number of elements, or longer than `max_payload`.
expected<frame_header> decode_header(const header_bytes_t& bytes, std::uint64_t max_payload);

// 32 random bytes from the kernel; a failure says why.
expected<token> random_token();
// Constant-time comparison.
bool tokens_equal(const token& a, const token& b);

}  // namespace troupe::lane
