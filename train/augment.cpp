// Random crops and flips of training images, and shifted text windows.
#include "train/augment.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

#include "tensor/random.hpp"

namespace troupe {

namespace {

constexpr std::int64_t default_crop_pad = 2, max_crop_pad = 16;

expected<augmentation> bad(std::string_view text, const std::string& why) {
  return failure{
      "--augment '" + std::string(text) + "': " + why +
      "; use none, or any of flip, crop (a margin of 2 pixels) and crop=N (1 to 16), separated by commas, for "
      "images, or shift for a text"};
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
    } else if (item == "shift") {
      if (a.shift) return bad(text, "shift is named twice");
      a.shift = true;
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
  if (a.shift) s += s.empty() ? "shift" : ",shift";
  return s;
}

std::optional<failure> augmentation_unfit(const augmentation& a, const dataset& d) {
  const shape sample = d.sample_shape();
  if (a.of_images() && sample.rank() != 3)
    return failure{"--augment " + name_of(a) + " crops and flips images, and " + d.name + " holds samples of shape " +
                   sample.str() + (a.shift ? "; use --augment shift alone" : "; use --augment none")};
  const bool text_windows = sample.rank() == 1 && d.labels_per_sample() == sample.numel();
  if (a.shift && !text_windows)
    return failure{"--augment " + name_of(a) + " shifts a text's windows, and " + d.name + " holds samples of shape " +
                   sample.str() + " (not a text)" +
                   (a.of_images() ? "; leave shift out" : "; use --augment none, or crop or flip for images")};
  return std::nullopt;
}

void augment_images(tensor_view images, const augmentation& a, std::span<const std::int64_t> ids, std::uint64_t seed,
                    std::int64_t epoch, float background) {
  if (!a.of_images()) return;
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

std::int64_t window_shift(std::uint64_t seed, std::int64_t epoch, std::int64_t context) {
  TROUPE_CHECK(context > 0, "window_shift: the context must be positive");
  constexpr std::uint64_t stream = 0x7368696674;  // "shift": apart from the images' (epoch, sample) streams
  return static_cast<std::int64_t>(derive_seed(seed, {stream, static_cast<std::uint64_t>(epoch)}) %
                                   static_cast<std::uint64_t>(context));
}

void shift_windows(tensor_view tokens, tensor_view labels, const augmentation& a, std::span<const std::int64_t> ids,
                   const dataset& train, std::uint64_t seed, std::int64_t epoch) {
  if (!a.shift) return;
  const std::int64_t b = tokens.rank() == 2 ? tokens.size(0) : -1, t = tokens.rank() == 2 ? tokens.size(1) : -1;
  TROUPE_CHECK(tokens.type() == dtype::f32 && b >= 0 && labels.type() == dtype::i32 && labels.rank() == 2 &&
                   labels.size(0) == b && labels.size(1) == t,
               "shift_windows: tokens must be (B, T) f32 and labels (B, T) i32");
  TROUPE_CHECK(static_cast<std::int64_t>(ids.size()) == b, "shift_windows: one id per window");
  TROUPE_CHECK(
      train.images.rank() == 2 && train.images.size(1) == t && train.labels.rank() == 2 && train.labels.size(1) == t,
      "shift_windows: the training split must hold windows of the batch's length");
  const std::int64_t s = window_shift(seed, epoch, t), n = train.size();
  if (s == 0) return;
  const float* x = train.images.data<float>();
  const std::int32_t* y = train.labels.data<std::int32_t>();
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int64_t k = ids[static_cast<std::size_t>(i)];
    TROUPE_CHECK(k >= 0 && k < n, "shift_windows: a window id is outside the training split");
    if (k == n - 1) continue;  // the last window has no successor and stays in place (gathered as it is)
    // Windows k and k + 1 lie end to end, so characters [kT + s, (k+1)T + s) start at x[kT + s].
    std::copy_n(x + k * t + s, t, tokens.data<float>() + i * t);
    std::copy_n(y + k * t + s, t, labels.data<std::int32_t>() + i * t);
  }
}

}  // namespace troupe
