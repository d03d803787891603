// A small deterministic random generator (xoshiro256** seeded through splitmix64).
// Unlike <random>'s distributions its outputs are specified here, so a seed gives the
// same weights, shuffles and synthetic data with every compiler and standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numbers>
#include <span>

namespace troupe {

constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Mixes a base seed with stream identifiers (block index, epoch, rank...) into one seed,
// so that independent streams never depend on the order they are drawn in.
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::initializer_list<std::uint64_t> stream) {
  std::uint64_t s = seed;
  std::uint64_t out = splitmix64(s);
  for (std::uint64_t v : stream) {
    s ^= v + 0x632be59bd9b4e019ULL + (out << 6) + (out >> 2);
    out = splitmix64(s);
  }
  return out;
}

class rng {
 public:
  explicit rng(std::uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 24 bits of precision (exactly representable as float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }

  // Standard normal by Box-Muller in double, rounded to float.
  float normal() {
    const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    const double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }

  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift with rejection: unbiased).
  std::uint64_t below(std::uint64_t n) {
    for (;;) {
      const unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
      const auto low = static_cast<std::uint64_t>(m);
      if (low >= n || low >= (0 - n) % n) return static_cast<std::uint64_t>(m >> 64);
    }
  }

  // Fisher-Yates shuffle.
  template <class T>
  void shuffle(std::span<T> v) {
    for (std::size_t i = v.size(); i > 1; --i) {
      const std::size_t j = below(i);
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace troupe
