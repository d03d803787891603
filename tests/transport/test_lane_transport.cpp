// Tests for transport/lane_listener.cpp, lane_dialler.cpp, lane_io.cpp and lane_stream.cpp: a
// member and a shard open a bulk lane on loopback, plain and over mutual TLS, and move
// tensors bit-exactly both ways; everything else that knocks on the lane's port (a wrong
// or reused token, a stranger's bytes, a silent connection, a certificate of the wrong
// role, a flood of connections) is closed and counted, a malformed or oversized frame
// closes the lane with the reason, and a lane whose peer goes away says so. The shard's
// reader says which f32 payloads hold no NaN or Inf. A ring neighbour's dialler wants a
// worker's certificate.
#define BOOST_TEST_MODULE lane_transport
#include <boost/test/unit_test.hpp>

#include <limits>
#include <thread>

#include "monitoring/refusals.hpp"
#include "tests/support/lane_ends.hpp"
#include "transport/frame_bound.hpp"
#include "transport/lane_frame.hpp"
#include "transport/lane_seal.hpp"
#include "transport/lane_stream.hpp"
#include "transport/lane_transport.hpp"

using namespace troupe;
using namespace troupe::lane;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// A member that opens a lane to shard 0 as rank 3 and waits for it.
void open_lane(shard_side& shard, member_side& member) {
  auto offer = shard.end->offer(3);
  BOOST_REQUIRE(offer.has_value());
  member.end->open(0, "127.0.0.1", *offer);
  auto opened = member.opened.take();
  BOOST_REQUIRE_MESSAGE(opened.has_value(), "the lane did not open");
  BOOST_TEST(*opened == 0u);
}

void exchanges_bit_exactly(shard_side& shard, member_side& member) {
  open_lane(shard, member);
  const tensor grad = pattern(1 << 20, 1), params = pattern((1 << 20) + 3, 2);
  BOOST_REQUIRE(member.end->send(0, 5, tensor(grad)));
  BOOST_REQUIRE(shard.end->send(3, 9, tensor(params)));
  auto got = shard.payloads.take();
  BOOST_REQUIRE(got.has_value());
  BOOST_TEST(got->peer == 3u);
  BOOST_TEST(got->ticket == 5u);
  BOOST_TEST(same_bits(got->data, grad));
  BOOST_TEST(got->finite);  // the shard's reader scanned it (Note [Scanned on arrival])
  auto back = member.payloads.take();
  BOOST_REQUIRE(back.has_value());
  BOOST_TEST(back->peer == 0u);
  BOOST_TEST(back->ticket == 9u);
  BOOST_TEST(same_bits(back->data, params));
}

// Note [Scanned on arrival]: the shard's reader scans each f32 payload chunk by chunk as
// it reads it, and a NaN or Inf in any chunk (the first, a middle one, the short last one)
// makes it say so; the payload still arrives bit-exactly, for the core to refuse. Other
// dtypes are not scanned.
void scans_what_it_reads(shard_side& shard, member_side& member) {
  open_lane(shard, member);
  const std::int64_t unit = static_cast<std::int64_t>(seal_unit / sizeof(float));
  const std::int64_t n = 3 * unit + 5;  // three whole chunks and a short one
  struct sample {
    std::int64_t at;  // where the bad value goes; -1: nowhere
    float value;
  };
  const sample samples[] = {{-1, 0.f},
                            {0, std::numeric_limits<float>::quiet_NaN()},
                            {unit + 7, std::numeric_limits<float>::infinity()},
                            {n - 1, -std::numeric_limits<float>::infinity()},
                            {3 * unit, std::numeric_limits<float>::quiet_NaN()}};
  std::uint64_t ticket = 0;
  for (const auto& c : samples) {
    tensor t = pattern(n, static_cast<std::uint32_t>(ticket) + 7);
    if (c.at >= 0) t.data<float>()[c.at] = c.value;
    BOOST_REQUIRE(member.end->send(0, ++ticket, tensor(t)));
    auto got = shard.payloads.take();
    BOOST_REQUIRE(got.has_value());
    BOOST_TEST(got->ticket == ticket);
    BOOST_TEST(same_bits(got->data, t));
    BOOST_TEST(got->finite == (c.at < 0), "bad value at " << c.at);
  }
  tensor halves = tensor::uninitialized({unit + 9}, dtype::f16);
  std::memset(halves.bytes(), 0x3c, halves.nbytes());
  BOOST_REQUIRE(member.end->send(0, ++ticket, tensor(halves)));
  auto got = shard.payloads.take();
  BOOST_REQUIRE(got.has_value());
  BOOST_TEST(same_bits(got->data, halves));
  BOOST_TEST(!got->finite);  // not scanned: the shard decodes it and the core scans the result
}

// A raw connection to the shard's lane port (plain or TLS as `tls` says).
lane_stream raw(const shard_side& shard, const tls_context& tls = nullptr, const std::string& role = "server") {
  auto s = lane_stream::dial("127.0.0.1", shard.end->port(), tls, role, steady::now() + 5s);
  BOOST_REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().message));
  return std::move(*s);
}

void send_hello(lane_stream& s, direction way, const std::string& key) {
  const auto h = encode_header(hello_header(way));
  BOOST_REQUIRE(!s.write(h.data(), h.size(), {steady::now() + 5s, {}}));
  BOOST_REQUIRE(!s.write(key.data(), key.size(), {steady::now() + 5s, {}}));
}

// Whether the shard closes `s` (rather than welcome it) within `within`.
bool closed_by_shard(lane_stream& s, std::chrono::milliseconds within = 5s) {
  header_bytes_t b{};
  auto e = s.read(b.data(), b.size(), {steady::now() + within, {}});
  return e.has_value() && e->find("deadline") == std::string::npos;
}

// Whether the shard refuses a hello for `way` with `key` on `s`: it may close the
// connection before the hello is all written (a write fails) or after (a read sees the
// close); a welcome or silence until the deadline is no refusal.
bool hello_refused(lane_stream& s, direction way, const std::string& key) {
  const auto h = encode_header(hello_header(way));
  if (s.write(h.data(), h.size(), {steady::now() + 5s, {}})) return true;
  if (s.write(key.data(), key.size(), {steady::now() + 5s, {}})) return true;
  return closed_by_shard(s);
}

// A member's two lane connections made by hand for `rank` (gradients, then answers),
// both welcomed: the test then writes what it likes on the first.
std::pair<lane_stream, lane_stream> welcomed_by_hand(shard_side& shard, std::uint32_t rank) {
  auto offer = shard.end->offer(rank);
  BOOST_REQUIRE(offer.has_value());
  std::pair<lane_stream, lane_stream> out{raw(shard), raw(shard)};
  header_bytes_t welcome{};
  send_hello(out.first, direction::to_shard, offer->token);
  BOOST_REQUIRE(!out.first.read(welcome.data(), welcome.size(), {steady::now() + 5s, {}}));
  send_hello(out.second, direction::to_member, offer->token);
  BOOST_REQUIRE(!out.second.read(welcome.data(), welcome.size(), {steady::now() + 5s, {}}));
  return out;
}

std::string random_key() {
  auto t = random_token();
  return std::string(t->begin(), t->end());
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_plain_lane_moves_tensors_bit_exactly_both_ways) {
  shard_side shard(plain());
  member_side member(plain());
  exchanges_bit_exactly(shard, member);
}

BOOST_AUTO_TEST_CASE(a_tls_lane_moves_tensors_bit_exactly_both_ways) {
  pki p;
  shard_side shard(secured(p, "server-0"));
  member_side member(secured(p, "worker-0"));
  exchanges_bit_exactly(shard, member);
}

BOOST_AUTO_TEST_CASE(a_plain_lane_s_reader_scans_f32_payloads_for_nan_and_inf) {
  shard_side shard(plain());
  member_side member(plain());
  scans_what_it_reads(shard, member);
}

BOOST_AUTO_TEST_CASE(a_tls_lane_s_reader_scans_f32_payloads_for_nan_and_inf) {
  pki p;
  shard_side shard(secured(p, "server-0"));
  member_side member(secured(p, "worker-0"));
  scans_what_it_reads(shard, member);
}

BOOST_AUTO_TEST_CASE(a_connection_without_an_offered_token_is_refused_and_counted) {
  shard_side shard(plain());
  const auto before = monitoring::refusals(monitoring::refusal::lane_refused);
  lane_stream s = raw(shard);
  send_hello(s, direction::to_shard, random_key());
  BOOST_TEST(closed_by_shard(s));
  BOOST_TEST(monitoring::refusals(monitoring::refusal::lane_refused) == before + 1);
  BOOST_TEST(!shard.payloads.take(100ms).has_value());
}

BOOST_AUTO_TEST_CASE(an_offered_token_opens_each_direction_once) {
  shard_side shard(plain());
  member_side member(plain());
  auto offer = shard.end->offer(3);
  BOOST_REQUIRE(offer.has_value());
  member.end->open(0, "127.0.0.1", *offer);
  BOOST_REQUIRE(member.opened.take().has_value());
  const auto before = monitoring::refusals(monitoring::refusal::lane_refused);
  lane_stream again = raw(shard);
  send_hello(again, direction::to_shard, offer->token);  // a replay of the member's hello
  BOOST_TEST(closed_by_shard(again));
  BOOST_TEST(monitoring::refusals(monitoring::refusal::lane_refused) == before + 1);
  BOOST_REQUIRE(member.end->send(0, 1, pattern(1000, 3)));  // the member's own lane is untouched
  BOOST_TEST(shard.payloads.take().has_value());
}

BOOST_AUTO_TEST_CASE(a_stranger_s_bytes_are_refused) {
  shard_side shard(plain());
  const auto before = monitoring::refusals(monitoring::refusal::lane_refused);
  lane_stream s = raw(shard);
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  BOOST_REQUIRE(!s.write(junk.data(), junk.size(), {steady::now() + 5s, {}}));
  BOOST_TEST(closed_by_shard(s));
  BOOST_TEST(monitoring::refusals(monitoring::refusal::lane_refused) == before + 1);
}

BOOST_AUTO_TEST_CASE(a_silent_connection_is_closed_at_the_handshake_deadline) {
  transport_options o = plain();
  o.handshake_timeout = 300ms;
  shard_side shard(o);
  const auto before = monitoring::refusals(monitoring::refusal::lane_refused);
  lane_stream s = raw(shard);
  const auto t0 = steady::now();
  BOOST_TEST(closed_by_shard(s, 5s));
  BOOST_TEST((steady::now() - t0 < 3s));
  BOOST_TEST(monitoring::refusals(monitoring::refusal::lane_refused) == before + 1);
}

BOOST_AUTO_TEST_CASE(connections_past_the_cap_are_closed_at_once) {
  transport_options o = plain();
  o.handshake_timeout = 5s;
  shard_side shard(o);
  std::vector<lane_stream> waiting;
  for (std::size_t i = 0; i < max_pending_hellos; ++i) waiting.push_back(raw(shard));
  std::this_thread::sleep_for(200ms);  // the acceptor has taken them all
  lane_stream extra = raw(shard);
  const auto t0 = steady::now();
  BOOST_TEST(closed_by_shard(extra, 3s));
  BOOST_TEST((steady::now() - t0 < 2s));  // long before the handshake deadline
}

BOOST_AUTO_TEST_CASE(a_tls_lane_refuses_plain_connections_and_the_wrong_role) {
  pki p;
  shard_side shard(secured(p, "server-0"));
  const auto before = monitoring::refusals(monitoring::refusal::lane_refused);
  lane_stream plain_peer = raw(shard);  // no TLS at all
  BOOST_TEST(hello_refused(plain_peer, direction::to_shard, random_key()));
  // A holder of the job's CA with a server's certificate is not a member.
  auto offer = shard.end->offer(3);
  BOOST_REQUIRE(offer.has_value());
  lane_stream posing = raw(shard, p.context("server-1"), "server");
  BOOST_TEST(hello_refused(posing, direction::to_shard, offer->token));
  BOOST_TEST(monitoring::refusals(monitoring::refusal::lane_refused) == before + 2);
}

BOOST_AUTO_TEST_CASE(a_member_refuses_a_shard_with_a_worker_s_certificate) {
  pki p;
  shard_side shard(secured(p, "worker-0"));  // listens where a shard should, under a worker's certificate
  member_side member(secured(p, "worker-0"));
  auto offer = shard.end->offer(3);
  BOOST_REQUIRE(offer.has_value());
  member.end->open(0, "127.0.0.1", *offer);
  auto c = member.closed.take();
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->why.find("not 'server'") != std::string::npos, c->why);
  BOOST_TEST(!member.opened.take(100ms).has_value());
  BOOST_TEST(!member.end->send(0, 1, pattern(10, 1)));
}

// Note [Ring lanes]: a ring neighbour's dialler wants a worker's certificate where a
// member's wants a server's: it moves tensors to a worker's listener and refuses a shard's.
BOOST_AUTO_TEST_CASE(a_ring_neighbour_s_dialler_wants_a_worker_s_certificate) {
  pki p;
  transport_options as_neighbour = secured(p, "worker-0");
  as_neighbour.dialled_role = "worker";
  transport_options receiving = secured(p, "worker-0");  // both neighbours hold workers' certificates
  receiving.scan_finite = false;
  shard_side next(receiving);
  member_side prev(as_neighbour);
  auto offer = next.end->offer(1);
  BOOST_REQUIRE(offer.has_value());
  prev.end->open(2, "127.0.0.1", *offer);
  auto opened = prev.opened.take();
  BOOST_REQUIRE_MESSAGE(opened.has_value(), "the ring lane did not open");
  const tensor piece = pattern(1 << 16, 4);
  BOOST_REQUIRE(prev.end->send(2, 1, tensor(piece)));
  auto got = next.payloads.take();
  BOOST_REQUIRE(got.has_value());
  BOOST_TEST(got->peer == 1u);
  BOOST_TEST(same_bits(got->data, piece));
  BOOST_TEST(!got->finite);  // not scanned

  shard_side shard(secured(p, "server-0"));
  member_side misled(as_neighbour);
  auto shard_offer = shard.end->offer(1);
  BOOST_REQUIRE(shard_offer.has_value());
  misled.end->open(2, "127.0.0.1", *shard_offer);
  auto c = misled.closed.take();
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->why.find("not 'worker'") != std::string::npos, c->why);
}

// What a member that must not exit before its payloads are out (a ring neighbour's last
// pieces) watches: payloads pushed and not yet written, 0 once written or closed.
BOOST_AUTO_TEST_CASE(a_member_s_lane_counts_the_payloads_it_has_not_written) {
  shard_side shard(plain());
  member_side member(plain());
  BOOST_TEST(member.end->unsent(0) == 0u);
  open_lane(shard, member);
  const tensor big = pattern(std::int64_t{16} << 20, 3);  // 64 MB: tens of milliseconds to write
  for (std::uint64_t t = 1; t <= 3; ++t) BOOST_REQUIRE(member.end->send(0, t, tensor(big)));
  BOOST_TEST(member.end->unsent(0) > 0u);
  for (int i = 0; i < 3; ++i) BOOST_REQUIRE(shard.payloads.take().has_value());
  // The writer counts a payload written once its last write returns, which may be just
  // after the reader has it all: a bounded wait, not a race.
  const auto drained = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (member.end->unsent(0) != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return member.end->unsent(0);
  };
  BOOST_TEST(drained() == 0u);
  BOOST_REQUIRE(member.end->send(0, 4, tensor(big)));
  shard.end->drop(3, "test");
  BOOST_REQUIRE(member.closed.take().has_value());
  BOOST_TEST(drained() == 0u);
}

BOOST_AUTO_TEST_CASE(a_malformed_frame_closes_the_lane_with_its_reason) {
  shard_side shard(plain());
  auto [s, answers] = welcomed_by_hand(shard, 3);
  auto bad = encode_header(payload_header(1, dtype::f32, 64));
  bad[0] = std::byte{'X'};
  BOOST_REQUIRE(!s.write(bad.data(), bad.size(), {steady::now() + 5s, {}}));
  auto c = shard.closed.take();
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->peer == 3u);
  BOOST_TEST(c->why.find("not a Troupe lane frame") != std::string::npos, c->why);
  BOOST_TEST(!shard.payloads.take(100ms).has_value());
}

BOOST_AUTO_TEST_CASE(a_payload_over_the_frame_bound_closes_the_lane_before_allocating) {
  shard_side shard(plain());
  auto [s, answers] = welcomed_by_hand(shard, 4);
  const auto h = encode_header(payload_header(1, dtype::u8, frame_bound() + 1));  // only the header is sent
  BOOST_REQUIRE(!s.write(h.data(), h.size(), {steady::now() + 5s, {}}));
  auto c = shard.closed.take();
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->why.find("above this job's bound") != std::string::npos, c->why);
}

BOOST_AUTO_TEST_CASE(a_member_that_goes_away_closes_its_lane_on_the_shard) {
  shard_side shard(plain());
  auto member = std::make_unique<member_side>(plain());
  open_lane(shard, *member);
  member.reset();  // the member's process ends
  auto c = shard.closed.take();
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->peer == 3u);
  BOOST_TEST(!shard.end->send(3, 1, pattern(10, 1)));
}

BOOST_AUTO_TEST_CASE(a_shard_that_goes_away_closes_the_member_s_lane) {
  auto shard = std::make_unique<shard_side>(plain());
  member_side member(plain());
  open_lane(*shard, member);
  shard.reset();
  auto c = member.closed.take();
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->peer == 0u);
  BOOST_TEST(!member.end->send(0, 1, pattern(10, 1)));
}

BOOST_AUTO_TEST_CASE(a_dropped_member_s_lane_closes_and_a_new_offer_replaces_it) {
  shard_side shard(plain());
  member_side member(plain());
  open_lane(shard, member);
  shard.end->drop(3, "the worker left the job");
  auto c = member.closed.take();
  BOOST_REQUIRE(c.has_value());
  open_lane(shard, member);  // the member asks again and gets a lane
  BOOST_REQUIRE(member.end->send(0, 2, pattern(100, 5)));
  auto got = shard.payloads.take();
  BOOST_REQUIRE(got.has_value());
  BOOST_TEST(got->ticket == 2u);
}
