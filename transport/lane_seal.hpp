// lane_seal: the record layer of a TLS bulk lane once its hello is done (Note [Sealed lane
// frames]): AES-256-GCM with keys exported from the connection's TLS session, one per
// direction, and a counter as the nonce, so that a unit is accepted only once, in order,
// unaltered, on the connection and in the direction it was sealed for.
//
// Note [Sealed lane frames]
// OpenSSL's record layer cost a TLS lane most of its time here: a system call per 16 KB
// record each way (two when reading), and a copy out of its read buffer; 40 MB took 30-38
// ms on loopback where AES-256-GCM alone takes 13 per side. So a lane's TLS session only
// authenticates the peers (mutual certificates, the roles, the token in the hello) and
// agrees on keys: after the welcome, both sides take two 32-byte keys from the session
// (RFC 5705 exporters, labels "EXPORTER-troupe-lane-dialler" and "...-listener", by which
// side writes) and seal every unit they write themselves: the unit's bytes encrypted with
// AES-256-GCM under a 96-bit nonce that is the count of units sealed before it in that
// direction, followed by its 16-byte tag. A reader decrypts each unit in place where it
// belongs (a payload straight into its tensor) and refuses the connection at the first tag
// that does not verify: a unit altered, replayed, reordered, cut short or sealed for the
// other direction or another connection. Units are at most seal_unit bytes, so the writer
// encrypts the next while the reader decrypts the last. What TLS gave that this does not:
// close_notify (a connection cut between two frames reads as closed by the peer, which a
// lane treats as a failure anyway) and rekeying (a counter of 64 bits never wraps).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/expected.hpp"

struct ssl_st;
struct evp_cipher_ctx_st;

namespace troupe::lane {

inline constexpr std::size_t seal_unit = std::size_t{512} << 10;
inline constexpr std::size_t seal_tag = 16;
using seal_key = std::array<std::uint8_t, 32>;

class sealer {
 public:
  // Keys for the session of a finished handshake; `dialled`: this side connected.
  static expected<sealer> for_session(ssl_st* ssl, bool dialled);
  // Keys given directly (tests): what this side writes with, and what it reads with.
  sealer(const seal_key& out, const seal_key& in);

  // Encrypts n <= seal_unit bytes at `in` into `out` (n bytes, then the tag).
  void seal(const void* in, std::size_t n, std::uint8_t* out);
  // Decrypts n bytes at `inout` in place and checks `tag`; false when the unit is not the
  // next one sealed for this side (then `inout` holds garbage).
  bool open(void* inout, std::size_t n, const std::uint8_t* tag);

 private:
  struct ctx_free {
    void operator()(evp_cipher_ctx_st* c) const;
  };
  using ctx_ptr = std::unique_ptr<evp_cipher_ctx_st, ctx_free>;
  ctx_ptr enc_, dec_;
  std::uint64_t sealed_ = 0, opened_ = 0;
};

}  // namespace troupe::lane
