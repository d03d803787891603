// Tests for actors/protocol.cpp and protocol.hpp: errors carry their code and detail
// and render; every message of the type-ID block is registered under its C++ name, so a
// node can decode it; the local triggers are not (another node cannot send one) and are
// not part of any published interface.
#define BOOST_TEST_MODULE protocol
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "tests/support/caf_fixture.hpp"

using namespace troupe;

BOOST_FIXTURE_TEST_SUITE(protocol, test::threaded_system)

BOOST_AUTO_TEST_CASE(errors_carry_code_and_detail) {
  auto e = make_error(errc::not_finite, "gradient holds NaN");
  BOOST_TEST((troupe_code(e) == errc::not_finite));
  BOOST_TEST(describe(e) == "not_finite: gradient holds NaN");
  BOOST_TEST(sys->render(e).find("troupe: not_finite") != std::string::npos);
  BOOST_TEST(!troupe_code(caf::make_error(caf::sec::request_timeout)).has_value());
  BOOST_TEST(to_string(errc::stalled) == "stalled");
  const auto f = as_fault(e);
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::not_finite));
  BOOST_TEST(f->detail == "gradient holds NaN");
  BOOST_TEST(describe(make_error(fault{errc::stage_lost, "gone"})) == "stage_lost: gone");
  BOOST_TEST(!as_fault(caf::make_error(caf::sec::request_timeout)).has_value());
}

BOOST_AUTO_TEST_CASE(every_message_is_registered_under_its_name_and_no_local_trigger_is) {
  for (const char* name : {"troupe::kv_push", "troupe::params_reply", "troupe::worker_welcome",
                           "troupe::member_joined", "troupe::stage_hello", "troupe::activation", "troupe::job_result",
                           "troupe::lane_offer", "troupe::checkpoint_saved", "troupe::ring_piece",
                           "troupe::ring_mailbox_offer", "troupe::kv_shard_back"})
    BOOST_TEST(static_cast<bool>(sys->types().make_value(name)), name << " cannot be decoded");
  for (const char* name : {"troupe::join_trigger", "troupe::watchdog_tick", "troupe::run_request",
                           "troupe::next_step", "troupe::connect_retry", "troupe::hello_deadline",
                           "troupe::group_deadline", "troupe::ring_drain", "troupe::lane_payload", "troupe::lane_event",
                           "troupe::lane_overdue", "troupe::checkpoint_written", "troupe::checkpoint_committed",
                           "troupe::restart_ready", "troupe::replacement_found", "troupe::park_deadline", "troupe::bells_rung",
                           "troupe::bells_answered", "troupe::bell_deadline"})
    BOOST_TEST(!sys->types().make_value(name), name << " could arrive from another node");
  // Serialising a local trigger fails, so not even a peer built from this code can send one.
  std::vector<char> buf;
  caf::binary_serializer bs{*sys, buf};
  auto msg = caf::make_message(join_trigger{"127.0.0.1", 1, {}});
  BOOST_TEST(static_cast<bool>(msg.save(bs)));
}

// The published interfaces are what other nodes see (and what a joining node checks);
// each local one adds exactly the triggers of its own process.
template <class Published, class Local>
void local_extends_published_by(caf::actor_system& sys, std::size_t triggers) {
  const auto published = sys.message_types<Published>(), local = sys.message_types<Local>();
  BOOST_TEST(local.size() == published.size() + triggers);
  BOOST_TEST(std::includes(local.begin(), local.end(), published.begin(), published.end()));
  for (const auto& signature : published) BOOST_TEST(signature.find("trigger") == std::string::npos, signature);
}

BOOST_AUTO_TEST_CASE(published_interfaces_leave_the_local_triggers_out) {
  local_extends_published_by<coordinator_actor, local_coordinator_actor>(*sys, 5);
  local_extends_published_by<shard_actor, local_shard_actor>(*sys, 6);
  local_extends_published_by<stage_actor, local_stage_actor>(*sys, 12);
}

BOOST_AUTO_TEST_SUITE_END()
