// Tests for the wiring of a users' ring across nodes (client/kv_member_ring.cpp, Note [Ring
// connections] in core/ring_handshake.hpp), with one real member and its neighbour played
// by hand, in one process whose "network" is a stand-in connector: a next neighbour that
// never answers the hello, and a previous one that never says hello while a stranger
// does, each fail the real member's join with stage_lost naming the silent neighbour
// within --request-timeout; the stranger's hello wires nothing. Once wired, a stranger's
// ring lane ask, mailbox offer and hello are refused and counted (as the built-in ring's
// are, test_pipeline_stage).
#define BOOST_TEST_MODULE kv_ring_wiring
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <string>

#include "actors/coordinator.hpp"
#include "actors/runtime.hpp"
#include "client/remote_transport.hpp"
#include "monitoring/refusals.hpp"

using namespace troupe;
using steady = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t request_timeout_ms = 1000;

// An actor that takes every ring message and answers none: a neighbour that is there but
// says nothing.
caf::behavior silent_peer(caf::event_based_actor*) {
  return {[](ring_atom, const stage_hello&) {}};
}

// Stands in for the middleman across nodes: every address leads to `peer`.
caf::behavior connector_to(caf::event_based_actor*, caf::actor peer) {
  return {[=](caf::connect_atom, const std::string&,
              std::uint16_t) -> caf::result<caf::node_id, caf::strong_actor_ptr, std::set<std::string>> {
    return {peer.node(), caf::actor_cast<caf::strong_actor_ptr>(peer), std::set<std::string>{}};
  }};
}

// A --mode allreduce key-value job of 2 workers with no shards; worker `real` is a member
// of the client library joined by address, and the other is played by `stand_in`, which
// joins with an address too. `on_published`: called with the real member's actor.
struct ring_of_two {
  explicit ring_of_two(std::uint32_t real) : real(real) {
    configure_in_process(cfg);
    sys.emplace(cfg);
    job_spec job;
    job.kv = true;
    job.job_id = "kv-ring";
    job.mode = sync_mode::allreduce;
    job.workers = 2;
    job.servers = 0;
    job.request_timeout_ms = request_timeout_ms;
    coordinator = spawn_coordinator(*sys, job, model::none(), nullptr, {});
    silent = sys->spawn(silent_peer);
    stand_in.emplace(*sys);
    stand_in_handle = caf::actor_cast<caf::actor>(*stand_in);
  }
  ~ring_of_two() {
    store.reset();
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
  }

  // The real member's join, while the stand-in joins as the other rank; its fault, if any.
  std::optional<fault> join(std::function<void(const caf::actor&)> on_published = nullptr) {
    kv::member_options o;
    o.coordinator = coordinator;
    o.connect_timeout = std::chrono::seconds(5);
    o.wanted_rank = static_cast<std::int32_t>(real);
    o.connector = caf::actor_cast<caf::io::middleman_actor>(sys->spawn(connector_to, silent));
    o.publish = [on_published](const caf::actor& me) -> kv::or_fault<std::pair<std::string, std::uint16_t>> {
      if (on_published) on_published(me);
      return std::pair<std::string, std::uint16_t>{"127.0.0.1", 9};
    };
    auto joined = std::async(std::launch::async, [&] { return kv::join_in_process(*sys, o, "kv-ring", ""); });
    (*stand_in)
        ->request(coordinator, std::chrono::seconds(5), join_atom::value,
                  worker_join{"kv-ring", "127.0.0.1", 10, {}, {}, static_cast<std::int32_t>(1 - real)})
        .receive([](worker_welcome&) {},
                 [](caf::error& e) { BOOST_FAIL("the stand-in did not join: " << describe(e)); });
    auto r = joined.get();
    if (auto* f = std::get_if<fault>(&r)) return *f;
    store = std::move(std::get<std::unique_ptr<kv::kv_transport>>(r));
    return std::nullopt;
  }

  std::uint32_t real;
  caf::actor_system_config cfg;
  std::optional<caf::actor_system> sys;
  local_coordinator_actor coordinator;
  caf::actor silent;
  std::optional<caf::scoped_actor> stand_in;
  caf::actor stand_in_handle;
  std::unique_ptr<kv::kv_transport> store;  // the real member's, once joined
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_next_neighbour_that_never_answers_the_hello_fails_the_join_naming_it) {
  ring_of_two ring(0);  // worker 0 dials worker 1, which is silent
  const auto t0 = steady::now();
  auto f = ring.join();
  const auto took = steady::now() - t0;
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::stage_lost));
  BOOST_TEST(f->detail.find("worker 0 never heard from its ring neighbour worker 1 within --request-timeout") !=
                 std::string::npos,
             f->detail);
  BOOST_TEST((took >= std::chrono::milliseconds(request_timeout_ms)));
  BOOST_TEST((took < std::chrono::milliseconds(request_timeout_ms) + std::chrono::seconds(4)));
}

BOOST_AUTO_TEST_CASE(a_strangers_hello_wires_nothing_and_the_silent_previous_neighbour_is_named) {
  ring_of_two ring(1);  // worker 1 waits for worker 0's hello
  caf::actor stranger = ring.sys->spawn(silent_peer);
  auto f = ring.join([&](const caf::actor& member) {
    caf::send_as(stranger, member, ring_atom::value, stage_hello{0, 0});  // claims to be worker 0
  });
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::stage_lost));
  BOOST_TEST(f->detail.find("worker 1 never heard from its ring neighbour worker 0") != std::string::npos, f->detail);
  caf::anon_send_exit(stranger, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_wired_ring_refuses_a_strangers_lane_ask_mailbox_offer_and_hello) {
  ring_of_two ring(1);
  caf::actor member;
  auto f = ring.join([&](const caf::actor& m) {
    member = m;
    caf::send_as(ring.stand_in_handle, m, ring_atom::value, stage_hello{0, 0});  // worker 0's hello
  });
  BOOST_REQUIRE_MESSAGE(!f, (f ? to_string(*f) : ""));
  const auto before = monitoring::refusals(monitoring::refusal::not_a_neighbour);
  caf::scoped_actor stranger(*ring.sys);
  stranger->send(member, ring_atom::value, stage_hello{0, 0});
  stranger->send(member, ring_atom::value, ring_mailbox_offer{false, "troupe-not-a-mailbox", false, {}});
  std::string refused;  // answered after the two above: one sender's messages keep their order
  stranger->request(member, std::chrono::seconds(5), ring_atom::value, lane_open_atom::value)
      .receive([](lane_offer&) {}, [&](caf::error& e) { refused = describe(e); });
  BOOST_TEST(refused.find("only the previous worker in the ring may open a ring lane to worker 1") !=
                 std::string::npos,
             refused);
  BOOST_TEST(monitoring::refusals(monitoring::refusal::not_a_neighbour) == before + 3);
}
