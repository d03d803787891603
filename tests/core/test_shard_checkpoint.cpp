// Tests for core/shard_checkpoint.cpp (Note [Shard checkpoints]): a shard's image reads
// back exactly, SGD's and Adam's; a file of another model, optimizer or job, a damaged
// one and one whose sections disagree with its ranges are refused by name; resharding
// onto another key table packs the same values as cutting the whole vectors directly, and
// refuses old shards that do not tile the model.
#define BOOST_TEST_MODULE shard_checkpoint
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "core/shard_checkpoint.hpp"
#include "tensor/tensor_file.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const checkpoint_identity id{"job-a", "mlp:4-3", 15, "sgd"};

// A tensor of n floats: base, base + 1, ...
tensor ramp(std::int64_t n, float base) {
  tensor t = tensor::uninitialized({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = base + static_cast<float>(i);
  return t;
}

// The image shard `s` of `table` holds when the whole vectors are ramps from 0, 100, 200.
shard_image image_of(const key_table& table, std::uint32_t s, bool adam) {
  const auto ranges = table.ranges_of(s);
  shard_image img;
  img.shard = s;
  img.step = 12;
  img.version = 40 + s;
  for (const auto& r : ranges) img.ranges.emplace_back(r.offset, r.length);
  const std::int64_t n = table.shard_numel[s], total = 15;
  img.params = tensor::uninitialized({n});
  img.slot1 = tensor::uninitialized({n});
  pack_shard(img.params, ramp(total, 0), ranges);
  pack_shard(img.slot1, ramp(total, 100), ranges);
  if (adam) {
    img.slot2 = tensor::uninitialized({n});
    pack_shard(img.slot2, ramp(total, 200), ranges);
  }
  img.optimizer_steps = 7 + s;
  img.stage_steps = {{0, 3 + s}};
  return img;
}

// A table of the 15 floats cut into `shards` shards of ranges of at most `bound` floats.
key_table table_of(std::uint32_t shards, std::int64_t bound) {
  key_table t;
  t.shard_numel.assign(shards, 0);
  std::uint32_t s = 0;
  for (std::int64_t off = 0; off < 15; off += bound, s = (s + 1) % shards) {
    const std::int64_t len = std::min<std::int64_t>(bound, 15 - off);
    t.ranges.push_back({s, 0, off, len});
    t.shard_numel[s] += len;
  }
  return t;
}

bool same(const tensor& a, const tensor& b) {
  return a.numel() == b.numel() && std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_image_reads_back_exactly) {
  test::temp_dir dir("shard-ckpt-roundtrip");
  const key_table table = table_of(2, 4);
  for (bool adam : {false, true}) {
    checkpoint_identity who = id;
    who.optimizer = adam ? "adam" : "sgd";
    const shard_image img = image_of(table, 1, adam);
    const fs::path file = dir.path / shard_file_name(1);
    BOOST_REQUIRE(!write_shard_image(file, img, who));
    auto back = read_shard_image(file, who);
    BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
    BOOST_TEST(back->shard == 1u);
    BOOST_TEST(back->step == 12);
    BOOST_TEST(back->version == 41);
    BOOST_TEST(back->optimizer_steps == 8);
    BOOST_TEST((back->stage_steps == img.stage_steps));
    BOOST_TEST((back->ranges == img.ranges));
    BOOST_TEST(same(back->params, img.params));
    BOOST_TEST(same(back->slot1, img.slot1));
    BOOST_TEST(back->slot2.empty() == !adam);
    if (adam) BOOST_TEST(same(back->slot2, img.slot2));
  }
  BOOST_TEST(shard_file_name(3) == "shard-3.tf");
}

BOOST_AUTO_TEST_CASE(a_file_of_another_model_optimizer_or_job_is_refused_by_name) {
  test::temp_dir dir("shard-ckpt-identity");
  const fs::path file = dir.path / "shard-0.tf";
  BOOST_REQUIRE(!write_shard_image(file, image_of(table_of(1, 15), 0, false), id));
  auto other_model = id;
  other_model.model = "mlp:4-8-3";
  auto r = read_shard_image(file, other_model);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "mlp:4-3"));
  BOOST_TEST(has(r.error().message, "mlp:4-8-3"));
  auto adam = id;
  adam.optimizer = "adam";
  r = read_shard_image(file, adam);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "optimizer"));
  auto other_job = id;
  other_job.job_id = "job-b";
  r = read_shard_image(file, other_job);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "job-a"));
  BOOST_TEST(has(r.error().message, file.string()));
}

BOOST_AUTO_TEST_CASE(a_damaged_file_or_one_whose_sections_disagree_with_its_ranges_is_refused) {
  test::temp_dir dir("shard-ckpt-damaged");
  const fs::path file = dir.path / "shard-0.tf";
  BOOST_REQUIRE(!write_shard_image(file, image_of(table_of(1, 15), 0, false), id));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  auto r = read_shard_image(file, id);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "CRC"));
  // Ranges that claim 15 floats over sections of 4.
  tensor four = ramp(4, 0);
  const nlohmann::json meta = {{"identity", id.to_json()}, {"shard", 0},      {"step", 1},
                               {"version", 1},             {"ranges", {{0, 15}}}, {"optimizer_steps", 1},
                               {"stage_steps", nlohmann::json::array()}};
  BOOST_REQUIRE(!write_tensor_file(file, shard_state_kind, meta, {{"params", four}, {"slot1", four}}));
  r = read_shard_image(file, id);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "params"));
  // A range outside the model.
  const nlohmann::json outside = {{"identity", id.to_json()}, {"shard", 0},      {"step", 1},
                                  {"version", 1},             {"ranges", {{12, 4}}}, {"optimizer_steps", 1},
                                  {"stage_steps", nlohmann::json::array()}};
  BOOST_REQUIRE(!write_tensor_file(file, shard_state_kind, outside, {{"params", four}, {"slot1", four}}));
  r = read_shard_image(file, id);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "outside the model"));
}

BOOST_AUTO_TEST_CASE(resharding_packs_what_cutting_the_whole_vectors_would) {
  for (bool adam : {false, true}) {
    const key_table before = table_of(2, 4), after = table_of(3, 2);
    std::vector<shard_image> old{image_of(before, 0, adam), image_of(before, 1, adam)};
    for (std::uint32_t s = 0; s < 3; ++s) {
      auto img = reshard(old, after.ranges_of(s), 15);
      BOOST_REQUIRE_MESSAGE(img.has_value(), (img ? "" : img.error().message));
      const shard_image want = image_of(after, s, adam);
      BOOST_TEST(same(img->params, want.params));
      BOOST_TEST(same(img->slot1, want.slot1));
      if (adam) BOOST_TEST(same(img->slot2, want.slot2));
      BOOST_TEST((img->ranges == want.ranges));
      BOOST_TEST(img->version == 41);          // the largest old version
      BOOST_TEST(img->optimizer_steps == 8);   // and step count
      BOOST_TEST(img->stage_steps.at(0) == 4);
    }
  }
}

BOOST_AUTO_TEST_CASE(old_shards_that_do_not_tile_the_model_are_refused) {
  const key_table before = table_of(2, 4);
  const auto target = table_of(1, 15).ranges_of(0);
  auto r = reshard({image_of(before, 0, false)}, target, 15);  // shard 1 is missing
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "cover"));
  r = reshard({image_of(before, 0, false), image_of(before, 0, false)}, target, 15);  // shard 0 twice
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "exactly once"));
  r = reshard({}, target, 15);
  BOOST_REQUIRE(!r.has_value());
  r = reshard({image_of(before, 0, true), image_of(before, 1, false)}, target, 15);
  BOOST_REQUIRE(!r.has_value());
  BOOST_TEST(has(r.error().message, "optimizer"));
}
