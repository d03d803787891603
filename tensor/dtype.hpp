// Element types and device tags. f32 is the only type the ops compute in today; the
// others exist so that storage, the wire format and the GPU module can carry them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace troupe {

enum class dtype : std::uint8_t { f32 = 0, f16 = 1, bf16 = 2, i32 = 3, u8 = 4 };

constexpr std::size_t size_of(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16: return 2;
    case dtype::bf16: return 2;
    case dtype::i32: return 4;
    case dtype::u8: return 1;
  }
  return 0;
}

constexpr std::string_view name_of(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::i32: return "i32";
    case dtype::u8: return "u8";
  }
  return "?";
}

// Maps a wire byte back to a dtype; nullopt for values no build of Troupe has used.
constexpr std::optional<dtype> dtype_from_byte(std::uint8_t b) {
  if (b > static_cast<std::uint8_t>(dtype::u8)) return std::nullopt;
  return static_cast<dtype>(b);
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of<std::uint8_t> { static constexpr dtype value = dtype::u8; };

enum class device_kind : std::uint8_t { cpu = 0, cuda = 1 };

struct device {
  device_kind kind = device_kind::cpu;
  int index = 0;
  friend constexpr bool operator==(device, device) = default;
};

inline constexpr device cpu_device{};

}  // namespace troupe
