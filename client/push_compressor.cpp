// push_compressor: encoding a push's parts, with a 2-bit residual per part (Note
// [Compressed key-value pushes] in push_compressor.hpp).
#include "client/push_compressor.hpp"

#include <cstring>

#include "base/check.hpp"

namespace troupe::kv {

push_compressor::push_compressor(grad_codec codec) : codec_(codec) {
  TROUPE_CHECK(codec_.kind != codec_kind::none, "push_compressor: a codec that compresses");
}

tensor push_compressor::encode_parts(const std::vector<push_part>& parts) {
  const dtype type = codec_.kind == codec_kind::two_bit ? dtype::u8
                     : codec_.kind == codec_kind::fp16  ? dtype::f16
                                                        : dtype::bf16;
  std::int64_t bytes = 0;
  for (const auto& p : parts) bytes += encoded_bytes(codec_, p.numel);
  tensor out = tensor::uninitialized({bytes / static_cast<std::int64_t>(size_of(type))}, type);
  std::byte* at = out.bytes();
  for (const auto& p : parts) {
    tensor wire;
    if (codec_.kind == codec_kind::two_bit) {
      residual& r = residual_of(p.part, p.numel);
      std::lock_guard lock(r.mu);
      wire = encode(codec_, floats(p.data, p.numel), r.value);
    } else {
      wire = encode(codec_, floats(p.data, p.numel));
    }
    std::memcpy(at, wire.bytes(), wire.nbytes());
    at += wire.nbytes();
  }
  return out;
}

push_compressor::residual& push_compressor::residual_of(kv_part_id part, std::int64_t numel) {
  std::lock_guard lock(mu_);
  auto& r = residuals_[part];
  if (!r) {
    r = std::make_unique<residual>();
    r->value = tensor({numel});
  }
  return *r;
}

}  // namespace troupe::kv
