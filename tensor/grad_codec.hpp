// grad_codec: how a gradient or a parameter slice is packed for the wire: as is (f32),
// as f16 or bf16 (round to nearest even), or quantised to 2 bits per element with error
// feedback, as MXNet's 2-bit compression does.
//
// Note [2-bit gradients]
// Each element v of (gradient + residual) becomes +s (code 1) when v >= t, -s (code 2)
// when v <= -t, and 0 (code 0) otherwise; the residual keeps v minus what was sent, so
// what is not sent now is sent later (error feedback). `2bit:T` is MXNet's scheme: t = s
// = T, fixed. `2bit` adapts to the gradient's scale, push by push: t is the mean |v| and s
// the mean |v| of the elements at or above it, so the step sends the big elements at
// their typical size and the small ones wait in the residual; with a fixed T the big ones
// are clipped to T per step and their residual grows without bound, which costs accuracy
// unless T is tuned per model. The adaptive t and s are taken per block of
// `two_bit_block` consecutive elements (QSGD's buckets), not per tensor: a shard's slice
// concatenates layers whose gradients differ in scale by orders of magnitude, and one
// scale for all of them left the small layers' elements in the residual for many steps
// and then sent them at the big layer's size. The wire tensor is
// u8: one s per block (f32, host order; T for every block with `2bit:T`), then four codes
// per byte, element i in bits 2*(i%4) of byte i/4 (code 3 and codes past the last element
// are malformed): 4*ceil(n/1024) + ceil(n/4) bytes, about 1/15.75 of f32. The residual
// lives on the worker, one per shard it pushes to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// Elements per 2-bit block: each block has its own threshold and magnitude.
inline constexpr std::int64_t two_bit_block = 1024;

enum class codec_kind : std::uint8_t { none, fp16, bf16, two_bit };

struct grad_codec {
  codec_kind kind = codec_kind::none;
  float threshold = 0.5f;  // two_bit with a fixed threshold
  bool adaptive = false;   // two_bit: the threshold follows the gradient's scale
  bool operator==(const grad_codec&) const = default;
};

// "none", "fp16", "bf16", "2bit" (adaptive) or "2bit:T" (fixed threshold T > 0, finite);
// what is wrong otherwise.
expected<grad_codec> parse_grad_codec(std::string_view text);
// The form parse_grad_codec reads back.
std::string to_string(const grad_codec& c);

// Scalar conversions, round to nearest even; NaN stays NaN, overflow becomes infinity.
std::uint16_t f32_to_f16(float f);
float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_bf16(float f);
float bf16_to_f32(std::uint16_t b);

// `x` (f32, contiguous) for the wire. For two_bit, `residual` (contiguous f32, x's
// element count) is added first and keeps what was not sent (Note [2-bit gradients]); the
// other codecs ignore it. none returns a copy.
tensor encode(const grad_codec& c, const_tensor_view x, tensor_view residual = {});
// A gradient's form for a push: encode(c, grad, residual), or, when `grad` holds NaN or
// Inf, `grad` itself (f32, which no codec's wire is) with the residual untouched, so the
// shard sees the bad values and refuses them as not_finite while the 2-bit residual,
// which would keep them for good, stays finite.
tensor encode_for_push(const grad_codec& c, tensor grad, tensor_view residual);
// The f32 tensor of `numel` elements that `wire` (contiguous, 1-d) encodes; what is wrong
// with it when its dtype, size or codes do not fit the codec.
expected<tensor> decode(const grad_codec& c, const_tensor_view wire, std::int64_t numel);
// The same, written into `out` (contiguous f32, its element count the wire's), such as
// the caller's own array; what is wrong, or nullopt. none, fp16 and bf16 check everything
// before they write; a 2-bit wire with a bad code is found while decoding, so it may leave
// `out` partly written.
std::optional<std::string> decode_into(const grad_codec& c, const_tensor_view wire, tensor_view out);
// The bytes encode() sends for `numel` elements.
std::int64_t encoded_bytes(const grad_codec& c, std::int64_t numel);

}  // namespace troupe
