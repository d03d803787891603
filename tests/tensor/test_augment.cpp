// Tests for tensor/augment.cpp: the --augment text and its errors; flips mirror exactly
// and about half the time; crops are shifts within the margin with the background shifted
// in; every draw is fixed by (seed, epoch, sample) and changes with the epoch.
#define BOOST_TEST_MODULE augment
#include <boost/test/unit_test.hpp>

#include <vector>

#include "tensor/augment.hpp"

using namespace troupe;

namespace {

// n images of 2 x 5 x 6 whose pixels are all distinct (and none is the background, -1).
tensor distinct_images(std::int64_t n) {
  tensor t({n, 2, 5, 6});
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % 60);
  return t;
}

float at(const tensor& t, std::int64_t i, std::int64_t c, std::int64_t y, std::int64_t x) {
  return t.data<float>()[((i * 2 + c) * 5 + y) * 6 + x];
}

// Whether image i of `out` is image i of `in` mirrored (or not) and shifted by (dy, dx).
bool is_shift(const tensor& out, const tensor& in, std::int64_t i, bool mirror, std::int64_t dy, std::int64_t dx) {
  for (std::int64_t c = 0; c < 2; ++c)
    for (std::int64_t y = 0; y < 5; ++y)
      for (std::int64_t x = 0; x < 6; ++x) {
        const std::int64_t sy = y + dy, sx = (mirror ? 5 - x : x) + dx;
        const float want = sy >= 0 && sy < 5 && sx >= 0 && sx < 6 ? at(in, i, c, sy, sx) : -1.f;
        if (at(out, i, c, y, x) != want) return false;
      }
  return true;
}

std::vector<std::int64_t> ids(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = 1000 + i;
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_text_names_crops_and_flips) {
  BOOST_TEST(!parse_augmentation("none")->any());
  BOOST_TEST(name_of(*parse_augmentation("none")) == "none");
  BOOST_TEST(name_of(*parse_augmentation("crop")) == "crop=2");
  BOOST_TEST(name_of(*parse_augmentation("flip,crop=3")) == "crop=3,flip");
  BOOST_TEST(parse_augmentation("flip")->flip);
  for (const char* bad : {"", "crop=0", "crop=17", "crop=x", "rotate", "flip,flip", "crop,crop=3", "flip,"}) {
    auto a = parse_augmentation(bad);
    BOOST_TEST_CONTEXT("'" << bad << "'") {
      BOOST_REQUIRE(!a.has_value());
      BOOST_TEST(a.error().message.find("use none, or any of flip, crop") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(flips_mirror_about_half_the_images) {
  const std::int64_t n = 200;
  const tensor in = distinct_images(n);
  tensor out = in;
  const auto v = ids(n);
  augment_images(out, *parse_augmentation("flip"), v, 7, 0, -1.f);
  std::int64_t mirrored = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const bool m = is_shift(out, in, i, true, 0, 0);
    BOOST_TEST((m || is_shift(out, in, i, false, 0, 0)));
    mirrored += m;
  }
  BOOST_TEST(mirrored > n / 4);
  BOOST_TEST(mirrored < 3 * n / 4);
}

BOOST_AUTO_TEST_CASE(crops_shift_within_the_margin_and_draws_follow_seed_epoch_and_sample) {
  const std::int64_t n = 100, pad = 2;
  const tensor in = distinct_images(n);
  const auto v = ids(n);
  const augmentation a = *parse_augmentation("crop,flip");
  tensor out = in;
  augment_images(out, a, v, 7, 3, -1.f);
  std::int64_t shifted = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    bool found = false;
    for (int m = 0; m < 2 && !found; ++m)
      for (std::int64_t dy = -pad; dy <= pad && !found; ++dy)
        for (std::int64_t dx = -pad; dx <= pad && !found; ++dx)
          if (is_shift(out, in, i, m == 1, dy, dx)) {
            found = true;
            shifted += dy != 0 || dx != 0;
          }
    BOOST_TEST(found);
  }
  BOOST_TEST(shifted > n / 2);  // 24 of 25 shifts move the image
  tensor again = in;
  augment_images(again, a, v, 7, 3, -1.f);
  BOOST_TEST(std::equal(again.data<float>(), again.data<float>() + again.numel(), out.data<float>()));
  // One sample alone draws what it drew in the batch.
  tensor one({1, 2, 5, 6});
  std::copy(in.data<float>() + 60, in.data<float>() + 120, one.data<float>());
  const std::int64_t id = v[1];
  augment_images(one, a, std::span<const std::int64_t>(&id, 1), 7, 3, -1.f);
  BOOST_TEST(std::equal(one.data<float>(), one.data<float>() + 60, out.data<float>() + 60));
  tensor next_epoch = in;
  augment_images(next_epoch, a, v, 7, 4, -1.f);
  BOOST_TEST(!std::equal(next_epoch.data<float>(), next_epoch.data<float>() + next_epoch.numel(), out.data<float>()));
  tensor none = in;
  augment_images(none, augmentation{}, v, 7, 3, -1.f);
  BOOST_TEST(std::equal(none.data<float>(), none.data<float>() + none.numel(), in.data<float>()));
}
