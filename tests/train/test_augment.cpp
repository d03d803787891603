// Tests for train/augment.cpp: the --augment text and its errors; flips mirror exactly
// and about half the time; crops are shifts within the margin with the background shifted
// in; every draw is fixed by (seed, epoch, sample) and changes with the epoch; shifted text
// windows show every character once an epoch, from an offset fixed by (seed, epoch);
// each kind refuses the other kind's samples.
#define BOOST_TEST_MODULE augment
#include <boost/test/unit_test.hpp>
#include <set>
#include <vector>

#include "train/augment.hpp"
#include "train/sampler.hpp"

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

// A text's training split as train/text_dataset.cpp lays it out: n windows of t
// characters end to end, where character p is the token p and its label is p + 1.
dataset counting_windows(std::int64_t n, std::int64_t t) {
  dataset d;
  d.name = "counting";
  d.num_classes = n * t + 1;
  d.images = tensor({n, t});
  d.labels = tensor({n, t}, dtype::i32);
  for (std::int64_t p = 0; p < n * t; ++p) {
    d.images.data<float>()[p] = static_cast<float>(p);
    d.labels.data<std::int32_t>()[p] = static_cast<std::int32_t>(p + 1);
  }
  return d;
}

// An image dataset of n samples (1, 2, 2).
dataset tiny_images(std::int64_t n) {
  dataset d;
  d.name = "tiny-images";
  d.num_classes = 2;
  d.images = tensor({n, 1, 2, 2});
  d.labels = tensor({n}, dtype::i32);
  return d;
}

std::string unfit_message(const char* augment, const dataset& d) {
  auto bad = augmentation_unfit(*parse_augmentation(augment), d);
  return bad ? bad->message : std::string();
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
  for (const char* bad :
       {"", "crop=0", "crop=17", "crop=x", "rotate", "flip,flip", "crop,crop=3", "flip,", "shift,shift", "shift="}) {
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

BOOST_AUTO_TEST_CASE(the_text_names_shift) {
  const augmentation a = *parse_augmentation("shift");
  BOOST_TEST(a.shift);
  BOOST_TEST(a.any());
  BOOST_TEST(!a.of_images());
  BOOST_TEST(name_of(a) == "shift");
  BOOST_TEST(name_of(*parse_augmentation("shift,flip,crop")) == "crop=2,flip,shift");
  auto twice = parse_augmentation("shift,shift");
  BOOST_REQUIRE(!twice.has_value());
  BOOST_TEST(twice.error().message.find("shift is named twice") != std::string::npos, twice.error().message);
  BOOST_TEST(twice.error().message.find("or shift for a text") != std::string::npos, twice.error().message);
}

// Each kind refuses the other kind's samples, and says what to use instead.
BOOST_AUTO_TEST_CASE(shift_needs_a_text_and_crops_need_images) {
  const dataset text = counting_windows(4, 8), images = tiny_images(4);
  BOOST_TEST(unfit_message("shift", text).empty());
  BOOST_TEST(unfit_message("crop,flip", images).empty());
  BOOST_TEST(unfit_message("none", text).empty());
  const std::string shift_on_images = unfit_message("shift", images);
  BOOST_TEST(shift_on_images.find("shifts a text's windows") != std::string::npos, shift_on_images);
  BOOST_TEST(shift_on_images.find("tiny-images holds samples of shape (1, 2, 2) (not a text)") != std::string::npos,
             shift_on_images);
  BOOST_TEST(shift_on_images.find("use --augment none, or crop or flip") != std::string::npos, shift_on_images);
  const std::string flip_on_text = unfit_message("flip", text);
  BOOST_TEST(flip_on_text.find("crops and flips images") != std::string::npos, flip_on_text);
  BOOST_TEST(flip_on_text.find("use --augment none") != std::string::npos, flip_on_text);
  BOOST_TEST(unfit_message("crop,shift", text).find("use --augment shift alone") != std::string::npos);
  BOOST_TEST(unfit_message("crop,shift", images).find("leave shift out") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_window_shift_is_fixed_by_seed_and_epoch) {
  std::set<std::int64_t> seen;
  bool seeds_differ = false;
  for (std::int64_t e = 0; e < 20; ++e) {
    const std::int64_t s = window_shift(7, e, 256);
    BOOST_TEST((s >= 0 && s < 256));
    BOOST_TEST(window_shift(7, e, 256) == s);
    seeds_differ = seeds_differ || window_shift(8, e, 256) != s;
    seen.insert(s);
  }
  BOOST_TEST(seen.size() >= 15u);  // 20 draws of 256 offsets rarely collide
  BOOST_TEST(seeds_differ);
  BOOST_TEST(window_shift(7, 3, 1) == 0);
}

// Gathered in any order, an epoch's shifted windows are characters [kT + s, (k+1)T + s)
// with their labels one further on; together they show every character once; the last
// window stays in place; one window alone is what it was in the batch.
BOOST_AUTO_TEST_CASE(shifted_windows_show_every_character_once_an_epoch) {
  const std::int64_t n = 50, t = 8;
  const dataset train = counting_windows(n, t);
  const augmentation a = *parse_augmentation("shift");
  std::int64_t epoch = 0;
  while (window_shift(11, epoch, t) == 0) ++epoch;
  const std::int64_t s = window_shift(11, epoch, t);
  const auto order = epoch_permutation(n, 11, epoch);
  tensor x({n, t}), y({n, t}, dtype::i32);
  gather_batch(x, y, train, order);
  shift_windows(x, y, a, order, train, 11, epoch);
  std::vector<int> shown(static_cast<std::size_t>(n * t + s), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = order[static_cast<std::size_t>(i)], first = k == n - 1 ? k * t : k * t + s;
    BOOST_TEST_CONTEXT("window " << k << ", shift " << s) {
      for (std::int64_t p = 0; p < t; ++p) {
        BOOST_TEST(x.data<float>()[i * t + p] == static_cast<float>(first + p));
        BOOST_TEST(y.data<std::int32_t>()[i * t + p] == first + p + 1);
        if (k != n - 1) ++shown[static_cast<std::size_t>(first + p)];
      }
    }
  }
  for (std::int64_t p = s; p < (n - 1) * t + s; ++p) BOOST_TEST(shown[static_cast<std::size_t>(p)] == 1);
  tensor one_x({1, t}), one_y({1, t}, dtype::i32);
  const std::int64_t id = 17;
  gather_batch(one_x, one_y, train, std::span<const std::int64_t>(&id, 1));
  shift_windows(one_x, one_y, a, std::span<const std::int64_t>(&id, 1), train, 11, epoch);
  BOOST_TEST(one_x.data<float>()[0] == static_cast<float>(17 * t + s));
  tensor plain_x({n, t}), plain_y({n, t}, dtype::i32);
  gather_batch(plain_x, plain_y, train, order);
  shift_windows(plain_x, plain_y, augmentation{}, order, train, 11, epoch);
  BOOST_TEST(plain_x.data<float>()[0] == static_cast<float>(order[0] * t));
}
