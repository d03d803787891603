// grad_codec: f16/bf16 conversion and 2-bit quantisation with error feedback.
#include "tensor/grad_codec.hpp"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/check.hpp"
#include "tensor/ops.hpp"

namespace troupe {

namespace {

bool is_f32_1d(const const_tensor_view& x) { return x.type() == dtype::f32 && x.is_contiguous(); }

std::int64_t two_bit_blocks(std::int64_t numel) { return (numel + two_bit_block - 1) / two_bit_block; }

struct levels {
  float threshold, magnitude;
};

// The sum of |v[i]| over n elements (`all`: a NaN makes it NaN), or over those at or
// above t with their count, in 8 lanes of partial sums so that the additions do not wait
// on each other, and with masks, not branches: which side of t an element lies on is a
// coin flip.
struct abs_sums {
  double sum = 0;
  std::int64_t count = 0;
};
abs_sums abs_sums_at_or_above(const float* v, std::int64_t n, float t, bool all = false) {
  constexpr int lanes = 8;
  double part[lanes] = {};  // exact for a block's floats of one magnitude: no t above them all
  std::uint32_t counts[lanes] = {};
  const std::uint32_t keep = all ? ~0u : 0u;
  const auto add = [t, keep](float x, double& into, std::uint32_t& count) {
    const float a = std::abs(x);
    const std::uint32_t over = (0u - static_cast<std::uint32_t>(a >= t)) | keep;
    into += std::bit_cast<float>(std::bit_cast<std::uint32_t>(a) & over);
    count += over & 1u;
  };
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (int l = 0; l < lanes; ++l) add(v[i + l], part[l], counts[l]);
  for (int l = 0; i < n; ++i, ++l) add(v[i], part[l], counts[l]);
  abs_sums out;
  for (int l = 0; l < lanes; ++l) out.sum += part[l], out.count += counts[l];
  return out;
}

// One block's threshold t and the magnitude s its codes stand for (Note [2-bit gradients]).
levels two_bit_levels(const grad_codec& c, const float* v, std::int64_t n) {
  if (!c.adaptive) return {c.threshold, c.threshold};
  const float t = static_cast<float>(abs_sums_at_or_above(v, n, 0.0f, true).sum / static_cast<double>(n));
  if (!(t > 0)) return {std::numeric_limits<float>::infinity(), 0.0f};  // all zero: send nothing
  const abs_sums above = abs_sums_at_or_above(v, n, t);
  return {t, above.count > 0 ? static_cast<float>(above.sum / static_cast<double>(above.count)) : 0.0f};
}

}  // namespace

expected<grad_codec> parse_grad_codec(std::string_view text) {
  const auto bad = [&] {
    return failure{"--compression: '" + std::string(text) +
                   "' is not a codec; use none, fp16, bf16, 2bit or 2bit:THRESHOLD (e.g. 2bit:0.5)"};
  };
  if (text == "none") return grad_codec{};
  if (text == "fp16") return grad_codec{codec_kind::fp16};
  if (text == "bf16") return grad_codec{codec_kind::bf16};
  if (text == "2bit") return grad_codec{codec_kind::two_bit, 0.0f, true};
  if (text.rfind("2bit:", 0) != 0) return bad();
  const std::string t(text.substr(5));
  char* end = nullptr;
  const float v = std::strtof(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v) || v <= 0)
    return failure{"--compression: the 2-bit threshold must be a positive number, not '" + t + "'"};
  return grad_codec{codec_kind::two_bit, v};
}

std::string to_string(const grad_codec& c) {
  switch (c.kind) {
    case codec_kind::none:
      return "none";
    case codec_kind::fp16:
      return "fp16";
    case codec_kind::bf16:
      return "bf16";
    case codec_kind::two_bit: {
      if (c.adaptive) return "2bit";
      std::string t = std::to_string(c.threshold);
      while (t.size() > 1 && t.back() == '0') t.pop_back();
      if (t.back() == '.') t.pop_back();
      return "2bit:" + t;
    }
  }
  return "none";
}

std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u)  // infinity, or NaN (kept quiet)
    return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u);
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504
  if (a < 0x38800000u) {                        // a half subnormal (or zero)
    if (a < 0x33000000u) return sign;           // below half the smallest subnormal
    const std::uint32_t exp = a >> 23;
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp;
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = (a - 0x38000000u) >> 13;
  const std::uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

std::uint16_t f32_to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

float bf16_to_f32(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::int64_t encoded_bytes(const grad_codec& c, std::int64_t numel) {
  switch (c.kind) {
    case codec_kind::none:
      return numel * 4;
    case codec_kind::fp16:
    case codec_kind::bf16:
      return numel * 2;
    case codec_kind::two_bit:
      return 4 * two_bit_blocks(numel) + (numel + 3) / 4;
  }
  return numel * 4;
}

tensor encode(const grad_codec& c, const_tensor_view x, tensor_view residual) {
  TROUPE_CHECK(is_f32_1d(x), "encode: a contiguous f32 tensor");
  const std::int64_t n = x.numel();
  const float* in = x.data<float>();
  switch (c.kind) {
    case codec_kind::none: {
      tensor out = tensor::uninitialized(x.sizes());
      copy(out, x);
      return out;
    }
    case codec_kind::fp16:
    case codec_kind::bf16: {
      tensor out = tensor::uninitialized({n}, c.kind == codec_kind::fp16 ? dtype::f16 : dtype::bf16);
      auto* o = reinterpret_cast<std::uint16_t*>(out.bytes());
      if (c.kind == codec_kind::fp16)
        for (std::int64_t i = 0; i < n; ++i) o[i] = f32_to_f16(in[i]);
      else
        for (std::int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(in[i]);
      return out;
    }
    case codec_kind::two_bit: {
      TROUPE_CHECK(is_f32_1d(residual) && residual.numel() == n, "encode: 2-bit needs a residual of the gradient's size");
      tensor out({encoded_bytes(c, n)}, dtype::u8);  // zero: every code starts at 0
      float* r = residual.data<float>();
      for (std::int64_t i = 0; i < n; ++i) r[i] += in[i];
      auto* scales = reinterpret_cast<std::byte*>(out.bytes());
      auto* o = reinterpret_cast<std::uint8_t*>(out.bytes()) + 4 * two_bit_blocks(n);
      for (std::int64_t b = 0; b * two_bit_block < n; ++b) {
        const std::int64_t lo = b * two_bit_block, hi = std::min(n, lo + two_bit_block);
        const auto [t, s] = two_bit_levels(c, r + lo, hi - lo);
        std::memcpy(scales + 4 * b, &s, 4);
        // Masks, not branches, as in abs_sums_at_or_above; four codes make a byte (a block
        // starts on a byte).
        const std::uint32_t plus = std::bit_cast<std::uint32_t>(s), minus = std::bit_cast<std::uint32_t>(-s);
        for (std::int64_t i = lo; i < hi; i += 4) {
          unsigned byte = 0;
          for (std::int64_t k = 0; k < 4 && i + k < hi; ++k) {
            const float v = r[i + k];
            const std::uint32_t up = v >= t, down = v <= -t;
            r[i + k] = v - std::bit_cast<float>(((0u - up) & plus) | ((0u - down) & minus));
            byte |= (up | down << 1) << (2 * k);
          }
          o[i >> 2] = static_cast<std::uint8_t>(byte);
        }
      }
      return out;
    }
  }
  return {};
}

tensor encode_for_push(const grad_codec& c, tensor grad, tensor_view residual) {
  if (c.kind == codec_kind::none || !all_finite(grad)) return grad;
  return encode(c, grad, residual);
}

std::optional<std::string> decode_into(const grad_codec& c, const_tensor_view wire, tensor_view out) {
  const std::int64_t numel = out.numel();
  const auto wrong = [&](const std::string& what) {
    return "a " + to_string(c) + " tensor " + what + " (" + std::string(name_of(wire.type())) + ", " +
           std::to_string(wire.nbytes()) + " bytes for " + std::to_string(numel) + " elements)";
  };
  TROUPE_CHECK(is_f32_1d(out), "decode_into: a contiguous f32 destination");
  if (wire.rank() != 1 || !wire.is_contiguous() || wire.nbytes() != static_cast<std::size_t>(encoded_bytes(c, numel)))
    return wrong("of the wrong size");
  float* o = out.data<float>();
  switch (c.kind) {
    case codec_kind::none:
      if (wire.type() != dtype::f32) return wrong("of the wrong dtype");
      copy(out, wire);
      return std::nullopt;
    case codec_kind::fp16:
    case codec_kind::bf16: {
      if (wire.type() != (c.kind == codec_kind::fp16 ? dtype::f16 : dtype::bf16)) return wrong("of the wrong dtype");
      const auto* in = reinterpret_cast<const std::uint16_t*>(wire.bytes());
      if (c.kind == codec_kind::fp16)
        for (std::int64_t i = 0; i < numel; ++i) o[i] = f16_to_f32(in[i]);
      else
        for (std::int64_t i = 0; i < numel; ++i) o[i] = bf16_to_f32(in[i]);
      return std::nullopt;
    }
    case codec_kind::two_bit: {
      if (wire.type() != dtype::u8) return wrong("of the wrong dtype");
      const auto* scales = reinterpret_cast<const std::byte*>(wire.bytes());
      const auto* in = reinterpret_cast<const std::uint8_t*>(wire.bytes()) + 4 * two_bit_blocks(numel);
      for (std::int64_t b = 0; b * two_bit_block < numel; ++b) {
        float s = 0;
        std::memcpy(&s, scales + 4 * b, 4);
        if (!std::isfinite(s) || s < 0)
          return wrong("with the magnitude " + std::to_string(s) + " in block " + std::to_string(b));
        const float values[3] = {0.0f, s, -s};
        const std::int64_t lo = b * two_bit_block, hi = std::min(numel, lo + two_bit_block);
        for (std::int64_t i = lo; i < hi; ++i) {
          const unsigned code = (in[i >> 2] >> (2 * (i & 3))) & 3u;
          if (code == 3) return wrong("with the invalid code 3 at element " + std::to_string(i));
          o[i] = values[code];
        }
      }
      // Padding codes past the last element must be zero, or the sender packed another size.
      for (std::int64_t i = numel; i < ((numel + 3) / 4) * 4; ++i)
        if ((in[i >> 2] >> (2 * (i & 3))) & 3u) return wrong("with codes past its last element");
      return std::nullopt;
    }
  }
  return wrong("of an unknown codec");
}

expected<tensor> decode(const grad_codec& c, const_tensor_view wire, std::int64_t numel) {
  if (numel < 0)
    return failure{"a " + to_string(c) + " tensor of negative size (" + std::to_string(numel) + " elements)"};
  tensor out = tensor::uninitialized({numel});
  if (auto e = decode_into(c, wire, out.view())) return failure{std::move(*e)};
  return out;
}

}  // namespace troupe
