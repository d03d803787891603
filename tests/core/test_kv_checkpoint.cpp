// Tests for core/kv_checkpoint.cpp (Note [Key-value checkpoints]): a key-value shard's
// image reads back exactly (values, slots, versions, steps, the shards' optimizer and its
// schedule, or none); a file of another job is refused by name; the registry's keys go
// to JSON and back, and a resumed job keeps only the keys whose every part its shards'
// files hold; a registry restored from them finds its keys by name and id, places new
// keys after the highest id, and refuses a part on a shard the job does not have. Through
// shard_core: a key-value shard's image restores into a fresh shard that then goes on as
// the first would, a key nobody pushed does not hold checkpoints back, and a shard with
// nothing to wait for takes a step the coordinator asks for at once.
#define BOOST_TEST_MODULE kv_checkpoint
#include <boost/test/unit_test.hpp>

#include "core/kv_checkpoint.hpp"
#include "core/shard_core.hpp"
#include "tests/support/numeric.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using test::same_bits;

namespace {

const checkpoint_identity id{"job-kv", "key-value", 0, "the shards'"};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

kv_shard_image sample_image() {
  kv_shard_image s;
  s.shard = 1;
  s.step = 8;
  s.has_optimizer = true;
  s.optimizer = optimizer_config{optimizer_kind::adam, 0.f, false, 0.01f, 0.8f, 0.99f, 1e-6f};
  s.schedule = lr_schedule{lr_schedule_kind::cosine, 0.1f, 5, 100, 0.1f};
  s.parts.push_back(
      {make_part_id(0, 0), "s:w", 8, 8, test::vec({1, 2, 3}), test::vec({4, 5, 6}), test::vec({7, 8, 9})});
  s.parts.push_back({make_part_id(3, 1), "i:7", 5, 5, test::vec({-1}), test::vec({-2}), test::vec({-3})});
  return s;
}

shard_config kv_sync_config(std::int64_t every) {
  shard_config cfg;
  cfg.mode = sync_mode::sync;
  cfg.rule_keeps_lr = true;
  cfg.has_optimizer = false;
  cfg.checkpoint_every = every;
  return cfg;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_key_value_shards_image_reads_back_exactly) {
  test::temp_dir dir("kv-checkpoint");
  const auto path = dir.path / "kv-shard-1.tf";
  const kv_shard_image s = sample_image();
  BOOST_REQUIRE(!write_kv_shard_image(path, s, id));
  auto back = read_kv_shard_image(path, id);
  BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  BOOST_TEST(back->shard == 1u);
  BOOST_TEST(back->step == 8);
  BOOST_TEST(back->has_optimizer);
  BOOST_TEST((back->optimizer == s.optimizer));
  BOOST_TEST((back->schedule.kind == lr_schedule_kind::cosine));
  BOOST_TEST(back->schedule.warmup_steps == 5);
  BOOST_TEST(back->schedule.final_fraction == 0.1f);
  BOOST_REQUIRE(back->parts.size() == 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    BOOST_TEST(back->parts[i].id == s.parts[i].id);
    BOOST_TEST(back->parts[i].key == s.parts[i].key);
    BOOST_TEST(back->parts[i].version == s.parts[i].version);
    BOOST_TEST(back->parts[i].optimizer_steps == s.parts[i].optimizer_steps);
    BOOST_TEST(same_bits(back->parts[i].value, s.parts[i].value));
    BOOST_TEST(same_bits(back->parts[i].slot1, s.parts[i].slot1));
    BOOST_TEST(same_bits(back->parts[i].slot2, s.parts[i].slot2));
  }
  // Without the shards' optimizer: values only.
  kv_shard_image plain;
  plain.parts.push_back({make_part_id(0, 0), "s:w", 2, 0, test::vec({1, 2}), {}, {}});
  BOOST_REQUIRE(!write_kv_shard_image(path, plain, id));
  auto plain_back = read_kv_shard_image(path, id);
  BOOST_REQUIRE(plain_back.has_value());
  BOOST_TEST(!plain_back->has_optimizer);
  BOOST_TEST(plain_back->parts.at(0).slot1.empty());
  // Another job's identity is refused by name.
  auto other = read_kv_shard_image(path, checkpoint_identity{"job-b", "key-value", 0, "the shards'"});
  BOOST_REQUIRE(!other.has_value());
  BOOST_TEST(has(other.error().message, "it belongs to job \"job-kv\""), other.error().message);
}

BOOST_AUTO_TEST_CASE(a_resumed_job_keeps_the_keys_its_shards_hold_whole) {
  kv_registry reg(2, 4);
  reg.init("s:a", {2, 2});  // one part
  reg.init("s:b", {4, 2});  // two parts of 4 floats, on the two shards
  reg.init("i:3", {1});
  auto keys = keys_from_json(keys_to_json(reg.keys()));
  BOOST_REQUIRE(keys.has_value());
  BOOST_REQUIRE(keys->size() == 3u);
  BOOST_TEST(keys->at(1).name == "s:b");
  BOOST_TEST(keys->at(1).dims == (std::vector<std::int64_t>{4, 2}));
  BOOST_REQUIRE(keys->at(1).parts.size() == 2u);
  // Shard 1 took its image before key b's second part and key 3 were defined.
  std::vector<std::vector<kv_part_id>> held(2);
  for (const auto& k : *keys)
    for (const auto& p : k.parts) held[p.shard].push_back(p.id);
  const kv_part_id late = keys->at(1).parts.at(1).id;
  auto& on = held[keys->at(1).parts.at(1).shard];
  on.erase(std::find(on.begin(), on.end(), late));
  const auto whole = keys_held_whole(*keys, held);
  BOOST_REQUIRE(whole.size() == 2u);
  BOOST_TEST(whole[0].name == "s:a");
  BOOST_TEST(whole[1].name == "i:3");
  BOOST_TEST(!keys_from_json(nlohmann::json::array({{{"id", 1}}})).has_value());
}

BOOST_AUTO_TEST_CASE(a_restored_registry_keeps_ids_and_places_new_keys_after_them) {
  kv_registry reg(2, 4);
  reg.init("s:a", {2, 2});
  reg.init("s:b", {4, 2});
  reg.init("i:3", {1});
  auto keys = reg.keys();
  keys.erase(keys.begin() + 1);  // b was left out
  auto back = kv_registry::restore(2, 4, keys);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(back->size() == 2u);
  BOOST_TEST(back->find("s:b") == nullptr);
  BOOST_TEST(back->find(1) == nullptr);
  BOOST_TEST(back->find(2)->name == "i:3");
  auto again = back->init("s:b", {4, 2});
  BOOST_TEST(again.created);
  BOOST_TEST(again.layout->id == 3u);  // after the highest restored id
  auto wrong = keys;
  wrong[0].parts[0].shard = 5;
  auto refused = kv_registry::restore(2, 4, wrong);
  BOOST_REQUIRE(!refused.has_value());
  BOOST_TEST(has(refused.error().message, "a part on shard 5, but the job has 2 shards"), refused.error().message);
}

// Two members, momentum SGD; a checkpoint every 2 rounds. Key a is pushed every step, key
// b never: b does not hold the checkpoint back. The image restores into a fresh shard,
// which then goes on bitwise as the first does.
BOOST_AUTO_TEST_CASE(a_parts_image_restores_into_a_shard_that_goes_on_as_the_first) {
  const kv_part_id a = make_part_id(0, 0), b = make_part_id(1, 0);
  shard_core first(kv_sync_config(2));
  first.set_optimizer(kv_optimizer{optimizer_config{optimizer_kind::sgd, 0.9f, false, 0.f},
                                   lr_schedule{lr_schedule_kind::constant, 0.1f, 0, 1, 0.f}});
  first.start({0, 1});
  BOOST_REQUIRE(!first.define(a, "s:a", test::vec({1, 2, 3})));
  BOOST_REQUIRE(!first.define(b, "s:b", test::vec({9})));
  const auto round = [&](shard_core& s, int r) {
    for (std::uint32_t m = 0; m < 2; ++m) s.push_part(m, a, r, test::random_tensor({3}, 10 * r + m));
  };
  round(first, 0);
  BOOST_TEST(!first.take_checkpoint_due());
  round(first, 1);
  const auto due = first.take_checkpoint_due();
  BOOST_REQUIRE(due.has_value());
  BOOST_TEST(*due == 2);
  const kv_shard_image image = first.parts_image(2);
  BOOST_TEST(image.parts.size() == 2u);
  shard_core second(kv_sync_config(2));
  BOOST_REQUIRE(!second.restore_parts(image));
  second.start({0, 1});
  BOOST_TEST(second.version(a) == 2);
  for (int r = 2; r < 4; ++r) {
    round(first, r);
    round(second, r);
  }
  BOOST_TEST(same_bits(first.value(a), second.value(a)));
  BOOST_TEST(same_bits(second.value(b), test::vec({9})));
  BOOST_TEST(second.version(a) == 4);
}

// Note [Key-value checkpoints]: a shard with no key that holds checkpoints back (here one
// whose only key nobody pushed, and one with none) takes a step the coordinator asks for
// at once; a shard whose pushed key is behind the step waits for it.
BOOST_AUTO_TEST_CASE(a_shard_with_nothing_to_wait_for_takes_an_asked_step_at_once) {
  shard_core idle(kv_sync_config(5)), empty(kv_sync_config(5)), busy(kv_sync_config(5));
  const kv_part_id a = make_part_id(0, 0);
  for (shard_core* s : {&idle, &empty, &busy}) s->start({0});
  BOOST_REQUIRE(!idle.define(a, "s:a", test::vec({1, 2})));
  BOOST_REQUIRE(!busy.define(a, "s:a", test::vec({1, 2})));
  busy.push_part(0, a, 0, test::vec({1, 1}));  // version 1, behind 5
  for (shard_core* s : {&idle, &empty, &busy}) s->request_checkpoint(5);
  BOOST_TEST((idle.take_checkpoint_due() == std::optional<std::int64_t>(5)));
  BOOST_TEST((empty.take_checkpoint_due() == std::optional<std::int64_t>(5)));
  BOOST_TEST(!busy.take_checkpoint_due());
  BOOST_TEST(idle.parts_image(5).parts.size() == 1u);
  BOOST_TEST(empty.parts_image(5).parts.empty());
  for (shard_core* s : {&idle, &empty}) {
    s->request_checkpoint(5);  // asked again: taken already
    BOOST_TEST(!s->take_checkpoint_due());
  }
}
