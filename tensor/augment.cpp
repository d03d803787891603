// Random crops and flips of training images.
#include "tensor/augment.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

#include "tensor/random.hpp"

namespace troupe {

namespace {

constexpr std::int64_t default_crop_pad = 2, max_crop_pad = 16;

expected<augmentation> bad(std::string_view text, const std::string& why) {
  return failure{"--augment '" + std::string(text) + "': " + why +
                 "; use none, or any of flip, crop (a margin of 2 pixels) and crop=N (1 to 16), separated by commas"};
}

}  // namespace

expected<augmentation> parse_augmentation(std::string_view text) {
  augmentation a;
  if (text == "none") return a;
  std::string_view rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item == "flip") {
      if (a.flip) return bad(text, "flip is named twice");
      a.flip = true;
    } else if (item == "crop" || item.starts_with("crop=")) {
      if (a.crop_pad > 0) return bad(text, "crop is named twice");
      a.crop_pad = default_crop_pad;
      if (item.size() > 4) {
        const std::string_view v = item.substr(5);
        std::int64_t n = 0;
        auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc() || ptr != v.data() + v.size() || n < 1 || n > max_crop_pad) {
          std::string why = "'";
          why.append(item).append("' needs a margin from 1 to 16");
          return bad(text, why);
        }
        a.crop_pad = n;
      }
    } else {
      return bad(text, item.empty() ? std::string("an empty item") : "unknown item '" + std::string(item) + "'");
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return a;
}

std::string name_of(const augmentation& a) {
  if (!a.any()) return "none";
  std::string s = a.crop_pad > 0 ? "crop=" + std::to_string(a.crop_pad) : "";
  if (a.flip) s += s.empty() ? "flip" : ",flip";
  return s;
}

std::optional<failure> augmentation_unfit(const augmentation& a, const dataset& d) {
  if (!a.any() || d.sample_shape().rank() == 3) return std::nullopt;
  return failure{"--augment " + name_of(a) + " crops and flips images, and " + d.name + " holds samples of shape " +
                 d.sample_shape().str() + "; use --augment none"};
}

void augment_images(tensor_view images, const augmentation& a, std::span<const std::int64_t> ids, std::uint64_t seed,
                    std::int64_t epoch, float background) {
  if (!a.any()) return;
  TROUPE_CHECK(images.type() == dtype::f32 && images.rank() == 4, "augment_images: images must be (B, C, H, W) f32");
  TROUPE_CHECK(static_cast<std::int64_t>(ids.size()) == images.size(0), "augment_images: one id per image");
  const std::int64_t channels = images.size(1), h = images.size(2), w = images.size(3), plane = h * w;
  std::vector<float> copy(static_cast<std::size_t>(channels * plane));
  for (std::int64_t i = 0; i < images.size(0); ++i) {
    rng r(derive_seed(seed, {static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(ids[i])}));
    // Always two draws, so each choice keeps its stream whatever the other is.
    const std::int64_t span = 2 * a.crop_pad + 1;
    const std::int64_t dy = static_cast<std::int64_t>(r.next_u64() % static_cast<std::uint64_t>(span)) - a.crop_pad;
    const std::int64_t dx = static_cast<std::int64_t>(r.next_u64() % static_cast<std::uint64_t>(span)) - a.crop_pad;
    const bool mirror = a.flip && (r.next_u64() >> 63) != 0;
    if (dx == 0 && dy == 0 && !mirror) continue;
    float* img = images.data<float>() + i * channels * plane;
    std::copy(img, img + channels * plane, copy.begin());
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t y = 0; y < h; ++y)
        for (std::int64_t x = 0; x < w; ++x) {
          // Output pixel (y, x) shows the padded source at (y + dy, x + dx), mirrored first.
          const std::int64_t sy = y + dy, sx = (mirror ? w - 1 - x : x) + dx;
          const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
          img[c * plane + y * w + x] = inside ? copy[static_cast<std::size_t>(c * plane + sy * w + sx)] : background;
        }
  }
}

}  // namespace troupe
