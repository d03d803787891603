// Tests for actors/shard_kv.cpp: a shard server of a key-value job (with the kv
// coordinator, in one process) takes well-formed pushes and pulls of a member, and
// refuses, with a typed error naming what is wrong and without changing the key, a push
// whose data does not match its parts, a push or pull of a part it does not hold, one
// addressed to another shard, rows outside the part, a gradient that is not finite, a
// push naming shared memory that the shard cannot or may not read, and a push of two
// parts whose second is refused (the first stays as it was); a pull offering a slot to a
// shard without the fast path is answered in the message. With the job's --compression
// pushes are decoded part by part (a part that does not decode refuses the whole push),
// and answers over the network come in its --pull-precision. On a bulk lane, pushes and
// pulls carry their values beside the messages, and the lane reader's finding that values
// are finite reaches the core. Collective pieces are checked before a round takes them.
// The member is a scoped actor that speaks the protocol directly, as a faulty or
// hand-written client would; the store (client/) never sends these.
#define BOOST_TEST_MODULE shard_kv
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <optional>

#include "actors/coordinator.hpp"
#include "actors/runtime.hpp"
#include "actors/shard_server.hpp"
#include "tensor/grad_codec.hpp"
#include "tests/support/hand_lanes.hpp"
#include "tests/support/numeric.hpp"
#include "tests/support/shm_tag.hpp"
#include "transport/shared_slots.hpp"

using namespace troupe;

namespace {

constexpr auto timeout = std::chrono::seconds(5);
constexpr std::int64_t n = 8;
const kv_part_id part = make_part_id(0, 0);

using test::filled;

// One member, one shard, async, no optimizer on the shard; key "w" of 8 ones defined.
struct kv_job {
  // fast_path_tag: the shard's tag for the same-host fast path (empty: off); the job's
  // --compression and --pull-precision.
  explicit kv_job(std::string fast_path_tag = {}, grad_codec compression = {}, grad_codec pull_precision = {},
                  std::shared_ptr<lane::shard_end> lanes = nullptr) {
    configure_in_process(cfg);
    sys.emplace(cfg);
    job_spec job;
    job.kv = true;
    job.job_id = "kv-test";
    job.mode = sync_mode::async;
    job.workers = 1;
    job.servers = 1;
    job.request_timeout_ms = 5000;
    job.compression = compression;
    job.pull_precision = pull_precision;
    coordinator = spawn_coordinator(*sys, job, model::none(), nullptr, {});
    shard_server = spawn_shard_server(*sys, coordinator, "kv-test", timeout, {}, fast_path_tag, std::move(lanes));
    join_as_shard(shard_server, "", 0);
    member.emplace(*sys);
    (*member)
        ->request(coordinator, timeout, join_atom::value, worker_join{"kv-test", {}, 0, {}, {}, -1})
        .receive([&](worker_welcome& w) { shard = w.shards.at(0); },
                 [&](caf::error& e) { BOOST_FAIL("the member did not join: " << describe(e)); });
    (*member)
        ->request(coordinator, timeout, kv_init_atom::value, kv_init{0, "s:w", {n}, filled(n, 1.f), 0})
        .receive([&](kv_key_layout& k) { BOOST_REQUIRE_EQUAL(k.parts.size(), 1u); },
                 [&](caf::error& e) { BOOST_FAIL("key w was not defined: " << describe(e)); });
  }
  ~kv_job() {
    member.reset();
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(shard_server, caf::exit_reason::user_shutdown);
  }

  // The push's outcome: nullopt when acknowledged, else the error's code and text.
  std::optional<std::pair<errc, std::string>> push(kv_push p) {
    std::optional<std::pair<errc, std::string>> out;
    (*member)
        ->request(shard, timeout, push_atom::value, std::move(p))
        .receive([](kv_push_ack&) {},
                 [&](caf::error& e) { out.emplace(troupe_code(e).value_or(errc::bad_job), describe(e)); });
    return out;
  }
  std::optional<std::pair<errc, std::string>> pull(kv_pull r, tensor* values = nullptr,
                                                   shared_tensor* where = nullptr, lane_tensor* on_lane = nullptr) {
    std::optional<std::pair<errc, std::string>> out;
    (*member)
        ->request(shard, timeout, pull_atom::value, std::move(r))
        .receive(
            [&](kv_pull_reply& reply) {
              if (values) *values = std::move(reply.data);
              if (where) *where = std::move(reply.shared);
              if (on_lane) *on_lane = std::move(reply.lane);
            },
            [&](caf::error& e) { out.emplace(troupe_code(e).value_or(errc::bad_job), describe(e)); });
    return out;
  }
  // Key w's values, pulled whole.
  tensor values() {
    tensor t;
    BOOST_REQUIRE(!pull(kv_pull{0, 0, {part}, {{}}, {0}, {}}, &t));
    return t;
  }

  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  local_coordinator_actor coordinator;
  local_shard_actor shard_server;
  shard_actor shard;
  std::optional<caf::scoped_actor> member;
};

// Pushes in 2-bit with the fixed threshold 0.5, answers in bf16.
struct kv_job_compressed : kv_job {
  kv_job_compressed() : kv_job({}, *parse_grad_codec("2bit:0.5"), *parse_grad_codec("bf16")) {}
};

struct kv_job_with_fast_path : kv_job {
  kv_job_with_fast_path() : kv_job(tag) {}
  static inline const std::string tag = test::fresh_shm_tag();
};

bool all_equal(const tensor& t, float v) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (t.data<float>()[i] != v) return false;
  return t.numel() == n;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_well_formed_push_and_pull_go_through, kv_job) {
  BOOST_TEST(!push(kv_push{0, 0, {part}, {0}, filled(n, 3.f), {}}));
  BOOST_TEST(all_equal(values(), 3.f));  // no optimizer: async keeps the latest gradient
  tensor rows;
  BOOST_TEST(!pull(kv_pull{0, 0, {part}, {{2, 5}}, {1}, {}}, &rows));
  BOOST_TEST(rows.numel() == 2);
}

BOOST_FIXTURE_TEST_CASE(a_push_whose_data_does_not_match_its_parts_is_malformed, kv_job) {
  auto e = push(kv_push{0, 0, {part}, {0}, filled(5, 3.f), {}});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::malformed));
  BOOST_TEST(e->second.find("carries 20 bytes") != std::string::npos);
  auto no_versions = push(kv_push{0, 0, {part}, {}, filled(n, 3.f), {}});
  BOOST_REQUIRE(no_versions);
  BOOST_TEST((no_versions->first == errc::malformed));
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(parts_it_does_not_hold_and_other_shards_messages_are_refused, kv_job) {
  auto e = push(kv_push{0, 0, {make_part_id(7, 0)}, {0}, filled(n, 3.f), {}});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::bad_shard));
  BOOST_TEST(e->second.find("is not on this shard") != std::string::npos);
  auto p = pull(kv_pull{0, 0, {make_part_id(7, 0)}, {{}}, {0}, {}});
  BOOST_REQUIRE(p);
  BOOST_TEST((p->first == errc::bad_shard));
  auto elsewhere = push(kv_push{3, 0, {part}, {0}, filled(n, 3.f), {}});
  BOOST_REQUIRE(elsewhere);
  BOOST_TEST((elsewhere->first == errc::bad_shard));
  BOOST_TEST(elsewhere->second.find("for shard 3") != std::string::npos);
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(a_push_or_pull_that_states_a_clock_is_a_training_member_s_and_is_refused, kv_job) {
  kv_push p{0, 0, {part}, {0}, filled(n, 3.f), {}};
  kv_pull r{0, 0, {part}, {{}}, {0}, {}};
  p.clock = r.clock = 0;
  for (auto e : {push(std::move(p)), pull(std::move(r))}) {
    BOOST_REQUIRE(e);
    BOOST_TEST((e->first == errc::bad_job));
    BOOST_TEST(e->second.find("a training member's message reached a shard of a key-value job") != std::string::npos);
  }
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(rows_outside_the_part_are_refused, kv_job) {
  auto e = pull(kv_pull{0, 0, {part}, {{8}}, {1}, {}});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::bad_shape));
  BOOST_TEST(e->second.find("row 8, outside its part") != std::string::npos);
  auto mismatched = pull(kv_pull{0, 0, {part}, {}, {}, {}});
  BOOST_REQUIRE(mismatched);
  BOOST_TEST((mismatched->first == errc::malformed));
}

BOOST_FIXTURE_TEST_CASE(a_gradient_that_is_not_finite_changes_nothing, kv_job) {
  tensor g = filled(n, 3.f);
  g.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();
  auto e = push(kv_push{0, 0, {part}, {0}, std::move(g), {}});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::not_finite));
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(a_push_in_shared_memory_at_a_shard_without_the_fast_path_changes_nothing, kv_job) {
  kv_push p{0, 0, {part}, {0}, tensor(), {}};
  p.shared = shared_tensor{"/troupe-0123456789abcdef-1-0-0badcafe", 64, 64, 1, 0, {n}};
  auto e = push(std::move(p));
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::malformed));
  BOOST_TEST(e->second.find("fast path is off") != std::string::npos);
  BOOST_TEST(all_equal(values(), 1.f));
  // A pull that offers a slot is answered in the message.
  kv_pull r{0, 0, {part}, {{}}, {0}, {}};
  r.reply_to = p.shared;
  tensor t;
  shared_tensor where;
  BOOST_TEST(!pull(std::move(r), &t, &where));
  BOOST_TEST(where.empty());
  BOOST_TEST(all_equal(t, 1.f));
}

BOOST_FIXTURE_TEST_CASE(a_push_naming_another_members_or_no_segment_changes_nothing, kv_job_with_fast_path) {
  // Member 0 names a segment that member 1 made: the shard refuses it.
  auto theirs = shm::shard_channel::create(tag, shm::slot_bytes_for(n), 1);
  BOOST_REQUIRE(theirs.has_value());
  kv_push p{0, 0, {part}, {0}, tensor(), {}};
  p.shared = shared_tensor{theirs->name(), 64, 64, 1, static_cast<std::uint8_t>(dtype::f32), {n}};
  auto e = push(p);
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::malformed));
  BOOST_TEST(e->second.find("member 1's, not member 0's") != std::string::npos);
  p.shared.segment = "/troupe-" + tag + "-1-0-0badcafe";  // nothing by that name
  auto missing = push(p);
  BOOST_REQUIRE(missing);
  BOOST_TEST((missing->first == errc::malformed));
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(a_pull_and_a_push_through_the_members_slots, kv_job_with_fast_path) {
  auto mine = shm::shard_channel::create(tag, shm::slot_bytes_for(n), 0);
  BOOST_REQUIRE(mine.has_value());
  kv_pull r{0, 0, {part}, {{}}, {0}, {}};
  r.reply_to = *mine->lend_reply_slot();
  tensor inline_values;
  shared_tensor where;
  BOOST_REQUIRE(!pull(std::move(r), &inline_values, &where));
  BOOST_TEST(inline_values.empty());
  BOOST_REQUIRE(!where.empty());
  auto got = mine->take_reply(where);
  BOOST_REQUIRE(got.has_value());
  BOOST_TEST(all_equal(*got, 1.f));
  auto slot = mine->put_push(filled(n, 4.f));
  BOOST_REQUIRE(slot.has_value());
  kv_push p{0, 0, {part}, {1}, tensor(), *slot};
  BOOST_TEST(!push(std::move(p)));
  mine->push_settled(false);
  BOOST_TEST(all_equal(values(), 4.f));  // no optimizer: async keeps the latest gradient
}

BOOST_FIXTURE_TEST_CASE(compressed_pushes_are_decoded_and_answers_come_in_the_pull_precision, kv_job_compressed) {
  const grad_codec two_bit = *parse_grad_codec("2bit:0.5");
  tensor residual({n});
  tensor wire = encode(two_bit, filled(n, 3.f), residual);  // every element sends +0.5
  BOOST_TEST(!push(kv_push{0, 0, {part}, {0}, std::move(wire), {}}));
  tensor answer;
  BOOST_REQUIRE(!pull(kv_pull{0, 0, {part}, {{}}, {0}, {}}, &answer));
  BOOST_TEST((answer.type() == dtype::bf16));
  BOOST_TEST(answer.nbytes() == static_cast<std::size_t>(n * 2));
  auto back = decode(*parse_grad_codec("bf16"), answer, n);
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(all_equal(*back, 0.5f));  // no optimizer: async keeps the latest (decoded) gradient
  // f32 is still taken (the same-host fast path's slots carry f32).
  BOOST_TEST(!push(kv_push{0, 0, {part}, {0}, filled(n, 2.f), {}}));
}

BOOST_FIXTURE_TEST_CASE(a_compressed_push_that_does_not_decode_is_refused_whole, kv_job_compressed) {
  const grad_codec two_bit = *parse_grad_codec("2bit:0.5");
  tensor residual({n});
  tensor wire = encode(two_bit, filled(n, 3.f), residual);
  BOOST_TEST(!push(kv_push{0, 0, {part}, {0}, tensor(wire), {}}));
  wire.data<std::uint8_t>()[4] = 0xFF;  // code 3 is no code
  auto bad = push(kv_push{0, 0, {part}, {0}, tensor(wire), {}});
  BOOST_REQUIRE(bad);
  BOOST_TEST((bad->first == errc::malformed));
  BOOST_TEST(bad->second.find("invalid code 3") != std::string::npos);
  auto short_one = push(kv_push{0, 0, {part}, {0}, tensor({3}, dtype::u8), {}});
  BOOST_REQUIRE(short_one);
  BOOST_TEST(short_one->second.find("carries 3 bytes") != std::string::npos);
  tensor answer;
  BOOST_REQUIRE(!pull(kv_pull{0, 0, {part}, {{}}, {0}, {}}, &answer));
  BOOST_TEST(all_equal(*decode(*parse_grad_codec("bf16"), answer, n), 0.5f));  // the first push's, unchanged
}

BOOST_FIXTURE_TEST_CASE(a_push_in_another_dtype_than_the_job_sends_is_refused, kv_job) {
  auto e = push(kv_push{0, 0, {part}, {0}, encode(*parse_grad_codec("fp16"), filled(n, 3.f)), {}});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::malformed));
  BOOST_TEST(e->second.find("the job sends gradients as f32") != std::string::npos);
  BOOST_TEST(all_equal(values(), 1.f));
}

BOOST_FIXTURE_TEST_CASE(a_push_refused_in_one_part_changes_no_part, kv_job) {
  kv_part_id second = 0;
  (*member)
      ->request(coordinator, timeout, kv_init_atom::value, kv_init{0, "s:v", {n}, filled(n, 1.f), 0})
      .receive([&](kv_key_layout& k) { second = k.parts.at(0).id; },
               [&](caf::error& e) { BOOST_FAIL("key v was not defined: " << describe(e)); });
  tensor both = filled(2 * n, 3.f);
  both.data<float>()[n + 2] = std::numeric_limits<float>::quiet_NaN();  // in key v's part
  auto e = push(kv_push{0, 0, {part, second}, {0, 0}, std::move(both), {}});
  BOOST_REQUIRE(e);
  BOOST_TEST((e->first == errc::not_finite));
  BOOST_TEST(all_equal(values(), 1.f));  // key w's part, first in the push, is unchanged
}

// Note [Bulk lanes]: a push whose values came on the lane is applied as an inline one; one
// whose payload does not fit its parts is refused whole; a pull that asks is answered on
// the lane, whose payload holds the values. The shard's lane end is driven by hand.
BOOST_AUTO_TEST_CASE(pushes_and_pulls_on_a_bulk_lane) {
  auto hand = std::make_shared<test::hand_lanes>();
  hand->open.insert(0);  // the member's lane carries answers
  kv_job job({}, {}, {}, hand);
  auto& lanes = *hand;
  lanes.h.payload(0, 1, {filled(n, 0.25f)});
  kv_push p{0, 0, {part}, {0}, tensor(), {}};
  p.lane = lane_tensor{1, 0, {n}};
  BOOST_TEST(!job.push(p).has_value());
  BOOST_TEST(all_equal(job.values(), 0.25f));  // no optimizer on the shard: the latest gradient
  lanes.h.payload(0, 2, {filled(n + 1, 9.f)});  // one float too many for the part
  p.lane = lane_tensor{2, 0, {n + 1}};
  const auto refused = job.push(p);
  BOOST_REQUIRE(refused.has_value());
  BOOST_TEST((refused->first == errc::malformed));
  BOOST_TEST(all_equal(job.values(), 0.25f));
  kv_pull r{0, 0, {part}, {{}}, {0}, {}};
  r.lane_reply = 3;
  tensor in_message;
  lane_tensor on_lane;
  BOOST_TEST(!job.pull(r, &in_message, nullptr, &on_lane).has_value());
  BOOST_TEST(in_message.empty());
  BOOST_TEST(on_lane.ticket == 3u);
  BOOST_REQUIRE(lanes.sent.size() == 1u);
  BOOST_TEST(all_equal(std::get<2>(lanes.sent[0]), 0.25f));
}

// Note [Scanned on arrival]: with NaN in values the reader did not vouch for, the push is
// refused and the key unchanged; the reader's word that values are finite reaches the
// core, which does not scan them again (the NaN stands for bytes it must not read twice).
BOOST_AUTO_TEST_CASE(the_lane_reader_s_scan_reaches_the_core) {
  auto hand = std::make_shared<test::hand_lanes>();
  kv_job job({}, {}, {}, hand);
  tensor poisoned = filled(n, 0.5f);
  poisoned.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  hand->h.payload(0, 1, {tensor(poisoned), false});
  kv_push p{0, 0, {part}, {0}, tensor(), {}};
  p.lane = lane_tensor{1, 0, {n}};
  const auto refused = job.push(p);
  BOOST_REQUIRE(refused.has_value());
  BOOST_TEST((refused->first == errc::not_finite));
  BOOST_TEST(all_equal(job.values(), 1.f));
  hand->h.payload(0, 2, {tensor(poisoned), true});
  p.lane = lane_tensor{2, 0, {n}};
  BOOST_TEST(!job.push(p).has_value());
  BOOST_TEST(std::isnan(job.values().data<float>()[1]));
}

// Note [Collectives on the shards]: the job's one member gets its own piece back; a piece
// whose data disagrees with its count, one for another shard and one from an actor that
// is not the member are refused with typed errors, and the shard still serves the member.
BOOST_FIXTURE_TEST_CASE(collective_pieces_are_checked_and_a_lone_members_comes_back, kv_job) {
  using failure = std::pair<errc, std::string>;
  auto give = [&](caf::scoped_actor& from, kv_collective c) {
    std::variant<kv_collective_reply, failure> out;
    from->request(shard, timeout, kv_coll_atom::value, std::move(c))
        .receive([&](kv_collective_reply& r) { out = std::move(r); },
                 [&](caf::error& e) { out = std::make_pair(troupe_code(e).value_or(errc::bad_job), describe(e)); });
    return out;
  };
  auto piece = [](std::uint32_t shard_index, std::int64_t count, tensor data) {
    kv_collective c;
    c.shard = shard_index;
    c.worker = 0;
    c.name = "sum#0/0";
    c.dims = {count};
    c.data = std::move(data);
    return c;
  };
  auto ok = give(*member, piece(0, n, filled(n, 2.5f)));
  BOOST_REQUIRE(std::holds_alternative<kv_collective_reply>(ok));
  BOOST_TEST(all_equal(std::get<kv_collective_reply>(ok).data, 2.5f));
  BOOST_TEST(std::get<kv_collective_reply>(ok).ranks == std::vector<std::uint32_t>{0});
  auto cut = give(*member, piece(0, n + 1, filled(n, 2.5f)));
  BOOST_REQUIRE(std::holds_alternative<failure>(cut));
  BOOST_TEST((std::get<1>(cut).first == errc::bad_shape));
  auto elsewhere = give(*member, piece(3, n, filled(n, 2.5f)));
  BOOST_REQUIRE(std::holds_alternative<failure>(elsewhere));
  BOOST_TEST((std::get<1>(elsewhere).first == errc::bad_shard));
  caf::scoped_actor stranger{*sys};
  auto theirs = give(stranger, piece(0, n, filled(n, 9.f)));
  BOOST_REQUIRE(std::holds_alternative<failure>(theirs));
  BOOST_TEST((std::get<1>(theirs).first == errc::not_member));
  auto again = give(*member, piece(0, n, filled(n, 1.f)));
  BOOST_REQUIRE(std::holds_alternative<kv_collective_reply>(again));
  BOOST_TEST(all_equal(std::get<kv_collective_reply>(again).data, 1.f));
}
