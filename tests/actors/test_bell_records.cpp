// Tests for actors/bell_records.cpp (Note [Doorbells] in transport/doorbell.hpp): every kind of
// record carries its id and its message unchanged; a message too long for a record is
// refused, and an error's long detail is cut to fit; a record too short or of no known
// kind has no head, and bytes of another message do not decode as it.
#define BOOST_TEST_MODULE bell_records
#include <boost/test/unit_test.hpp>

#include "actors/bell_records.hpp"
#include "actors/runtime.hpp"

using namespace troupe;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  system_fixture() {
    configure_in_process(cfg);
    sys.emplace(cfg);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(bell_records, system_fixture)

BOOST_AUTO_TEST_CASE(each_kind_carries_its_id_and_message) {
  kv_pull r = step_pull(3, 7, 0, 42, true);
  r.reply_to.segment = "/troupe-0123456789abcdef-1-0-00000000";
  r.reply_to.offset = 128;
  r.reply_to.capacity = 4096;
  r.reply_to.ticket = 9;
  auto rec = bells::record(*sys, bells::kind::pull, 1234567890123ull, r);
  BOOST_REQUIRE(rec.has_value());
  auto h = bells::head_of(*rec);
  BOOST_REQUIRE(h.has_value());
  BOOST_TEST((h->kind == bells::kind::pull));
  BOOST_TEST(h->id == 1234567890123ull);
  kv_pull back;
  BOOST_REQUIRE(bells::body_of(*sys, *rec, back));
  BOOST_TEST(back.shard == 3u);
  BOOST_TEST(back.worker == 7u);
  BOOST_TEST(back.clock == 42);
  BOOST_TEST(back.full);
  BOOST_TEST((back.parts == std::vector<kv_part_id>{stage_part(0)}));
  BOOST_TEST(back.reply_to.segment == r.reply_to.segment);
  BOOST_TEST(back.reply_to.ticket == 9u);

  auto ack = bells::record(*sys, bells::kind::ack, 5, kv_push_ack{{11}, {2}, true});
  BOOST_REQUIRE(ack.has_value());
  kv_push_ack a;
  BOOST_REQUIRE(bells::body_of(*sys, *ack, a));
  BOOST_TEST(a.versions == std::vector<std::int64_t>{11});
  BOOST_TEST(a.staleness == std::vector<std::int64_t>{2});
  BOOST_TEST(a.late);

  auto err = bells::error_record(*sys, 6, make_error(fault{errc::not_finite, "gradient holds NaN"}));
  caf::error e;
  BOOST_REQUIRE(bells::body_of(*sys, err, e));
  BOOST_TEST((troupe_code(e) == errc::not_finite));
  BOOST_TEST(describe(e) == "not_finite: gradient holds NaN");
}

BOOST_AUTO_TEST_CASE(too_long_a_message_is_refused_and_a_long_error_is_cut) {
  kv_push g = step_push(0, 1, 0, 2, 3, tensor({1000}));  // the tensor inline: far more than a record
  BOOST_TEST(!bells::record(*sys, bells::kind::push, 1, g).has_value());
  auto err = bells::error_record(*sys, 2, make_error(fault{errc::bad_shape, std::string(5000, 'x')}));
  BOOST_TEST(err.size() <= shm::bell_record_payload);
  caf::error e;
  BOOST_REQUIRE(bells::body_of(*sys, err, e));
  BOOST_TEST((troupe_code(e) == errc::bad_shape));
  BOOST_TEST(describe(e).size() < 1000u);
}

BOOST_AUTO_TEST_CASE(short_unknown_and_mismatched_records_are_refused) {
  std::vector<std::byte> short_one(bells::head_bytes - 1, std::byte{1});
  BOOST_TEST(!bells::head_of(short_one).has_value());
  std::vector<std::byte> no_kind(bells::head_bytes, std::byte{0});
  BOOST_TEST(!bells::head_of(no_kind).has_value());
  no_kind[0] = std::byte{6};
  BOOST_TEST(!bells::head_of(no_kind).has_value());
  auto ack = bells::record(*sys, bells::kind::ack, 5, kv_push_ack{{11}, {2}, false});
  BOOST_REQUIRE(ack.has_value());
  kv_pull_reply p;
  BOOST_TEST(!bells::body_of(*sys, *ack, p));
}

BOOST_AUTO_TEST_SUITE_END()
