// ring_mailbox: pieces cross between an outbox and an inbox bit-exactly; nothing goes
// through before the receiver accepted; the sender never overwrites a piece the receiver
// still holds, and gets space back in order; lent buffers are sealed in order, pieces
// never wrap, and an abandoned buffer's space comes back with the next release; a bad
// descriptor, another rank's or another job's mailbox and a nonsense release are
// refused without taking anything; pieces outlive the inbox.
#define BOOST_TEST_MODULE ring_mailbox
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/numeric.hpp"
#include "tests/support/shm_tag.hpp"
#include "transport/ring_mailbox.hpp"

using namespace troupe;

namespace {

using test::fresh_shm_tag;
using test::same_bits;

tensor ramp(std::int64_t n, float start) {
  tensor t({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

constexpr std::uint64_t sender_rank = 2;

// An outbox holding `pieces` pieces of `numel` floats, and the receiver's inbox on it.
struct mailbox_pair {
  std::string tag = fresh_shm_tag();
  shm::ring_outbox out;
  std::optional<shm::ring_inbox> in;
  mailbox_pair(std::int64_t numel, double pieces) {
    auto o = shm::ring_outbox::create(
        tag, static_cast<std::size_t>(pieces * static_cast<double>(shm::ring_outbox::bytes_for(numel))), sender_rank);
    BOOST_REQUIRE_MESSAGE(o.has_value(), (o ? std::string() : o.error().message));
    out = std::move(*o);
    auto i = shm::ring_inbox::open(out.name(), tag, sender_rank);
    BOOST_REQUIRE_MESSAGE(i.has_value(), (i ? std::string() : i.error().message));
    in.emplace(std::move(*i));
    out.accepted();
  }
  tensor take(const shared_tensor& where) {
    auto t = in->take(where);
    BOOST_REQUIRE_MESSAGE(t.has_value(), (t ? std::string() : t.error().message));
    return std::move(*t);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(nothing_goes_through_before_the_receiver_accepts_and_the_name_goes_then) {
  const std::string tag = fresh_shm_tag();
  auto o = shm::ring_outbox::create(tag, 1 << 16, sender_rank);
  BOOST_REQUIRE(o.has_value());
  BOOST_TEST(!o->usable());
  BOOST_TEST(!o->put(ramp(10, 1.0f)).has_value());
  BOOST_TEST(o->lend(10).empty());
  BOOST_TEST(std::filesystem::exists("/dev/shm" + o->name()));
  auto in = shm::ring_inbox::open(o->name(), tag, sender_rank);
  BOOST_REQUIRE(in.has_value());
  o->accepted();
  BOOST_TEST(o->usable());
  BOOST_TEST(!std::filesystem::exists("/dev/shm" + o->name()));  // both have it mapped: a crash leaves nothing
  BOOST_TEST(o->put(ramp(10, 1.0f)).has_value());
}

BOOST_AUTO_TEST_CASE(pieces_cross_bit_exactly_and_space_comes_back_in_order) {
  mailbox_pair m(1000, 3);
  std::vector<shared_tensor> sent;
  for (int i = 0; i < 3; ++i) {
    auto d = m.out.put(ramp(1000, static_cast<float>(i)));
    BOOST_REQUIRE(d.has_value());
    sent.push_back(*d);
  }
  BOOST_TEST(!m.out.put(ramp(1000, 9.0f)).has_value());  // full: this piece goes in the message
  std::optional<tensor> got[3];
  for (int i = 0; i < 3; ++i) {
    got[i] = m.take(sent[i]);
    BOOST_TEST(same_bits(*got[i], ramp(1000, static_cast<float>(i))));
  }
  BOOST_TEST(m.in->outstanding() == 3u);
  got[1].reset();  // done out of order: the first still holds its space, and so the second's
  BOOST_TEST(m.in->outstanding() == 2u);
  BOOST_TEST(!m.out.put(ramp(1000, 9.0f)).has_value());
  got[0].reset();  // now the first two are released together
  BOOST_TEST(m.in->outstanding() == 1u);
  auto again = m.out.put(ramp(1000, 4.0f));
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(same_bits(m.take(*again), ramp(1000, 4.0f)));
  BOOST_TEST(same_bits(*got[2], ramp(1000, 2.0f)));  // the third was not overwritten
}

BOOST_AUTO_TEST_CASE(a_receiver_writes_into_its_piece_in_place) {
  mailbox_pair m(8, 4);
  auto d = m.out.put(ramp(8, 1.0f));
  BOOST_REQUIRE(d.has_value());
  tensor t = m.take(*d);
  for (int i = 0; i < 8; ++i) t.data<float>()[i] += 1.0f;  // a running sum goes on in the piece
  BOOST_TEST(same_bits(t, ramp(8, 2.0f)));
}

BOOST_AUTO_TEST_CASE(lent_buffers_are_sealed_in_order_and_pieces_never_wrap) {
  mailbox_pair m(100, 2.5);  // room for two pieces and a half
  const std::uint64_t start = shm::header_bytes + 64;
  for (int round = 0; round < 6; ++round) {
    tensor a = m.out.lend(100), b = m.out.lend(100);
    BOOST_REQUIRE(!a.empty());
    BOOST_REQUIRE(!b.empty());
    BOOST_TEST(m.out.holds(a.bytes()));
    BOOST_TEST(m.out.lend(100).empty());  // a third does not fit until the receiver releases
    copy(a, ramp(100, static_cast<float>(round)));
    copy(b, ramp(100, static_cast<float>(round) + 0.5f));
    auto da = m.out.seal(a), db = m.out.seal(b);
    BOOST_REQUIRE(da.has_value());
    BOOST_REQUIRE(db.has_value());
    BOOST_TEST(!m.out.holds(a.bytes()));
    BOOST_TEST(da->ticket < db->ticket);
    BOOST_TEST(da->offset >= start);
    BOOST_TEST(da->offset + da->capacity <= start + m.out.capacity());  // never across the end
    BOOST_TEST(db->offset + db->capacity <= start + m.out.capacity());
    BOOST_TEST(same_bits(m.take(*da), ramp(100, static_cast<float>(round))));
    BOOST_TEST(same_bits(m.take(*db), ramp(100, static_cast<float>(round) + 0.5f)));
  }
}

BOOST_AUTO_TEST_CASE(a_buffer_sealed_out_of_order_goes_in_the_message) {
  mailbox_pair m(10, 8);
  tensor a = m.out.lend(10);
  BOOST_REQUIRE(!a.empty());
  auto later = m.out.put(ramp(10, 1.0f));  // written after a was lent, sealed before it
  BOOST_REQUIRE(later.has_value());
  BOOST_TEST(!m.out.seal(a).has_value());
  BOOST_TEST(!m.out.seal(ramp(10, 1.0f)).has_value());  // not a lent buffer at all
  BOOST_TEST(same_bits(m.take(*later), ramp(10, 1.0f)));
}

BOOST_AUTO_TEST_CASE(an_abandoned_buffer_is_skipped_by_the_next_release) {
  mailbox_pair m(100, 2);  // room for two pieces
  tensor a = m.out.lend(100);
  BOOST_REQUIRE(!a.empty());
  m.out.abandon(a.bytes());  // its piece travels in the message instead
  BOOST_TEST(!m.out.holds(a.bytes()));
  BOOST_TEST(!m.out.seal(a).has_value());
  auto b = m.out.put(ramp(100, 1.0f));
  BOOST_REQUIRE(b.has_value());
  BOOST_TEST(!m.out.put(ramp(100, 2.0f)).has_value());  // a's space is still taken
  { tensor got = m.take(*b); }                           // released past a's space too
  BOOST_TEST(m.out.put(ramp(100, 2.0f)).has_value());
  BOOST_TEST(m.out.put(ramp(100, 3.0f)).has_value());
}

BOOST_AUTO_TEST_CASE(bad_descriptors_are_refused_and_take_nothing) {
  mailbox_pair m(16, 4);
  auto d = m.out.put(ramp(16, 1.0f));
  BOOST_REQUIRE(d.has_value());
  auto refused = [&](shared_tensor w, const std::string& says) {
    const std::size_t held = m.in->outstanding();
    auto t = m.in->take(w);
    BOOST_TEST(!t.has_value());
    if (!t) BOOST_TEST(t.error().message.find(says) != std::string::npos, t.error().message);
    BOOST_TEST(m.in->outstanding() == held);
  };
  shared_tensor w = *d;
  w.segment = "/troupe-elsewhere";
  refused(w, "not the mailbox");
  w = *d;
  w.dtype = static_cast<std::uint8_t>(dtype::f16);
  refused(w, "not a flat f32");
  w = *d;
  w.offset = 1ull << 40;
  refused(w, "lies outside");
  w = *d;
  w.dims = {17};  // longer than what was written: its capacity does not match
  refused(w, "lies outside");
  w = *d;
  w.ticket += 64;
  refused(w, "does not hold what its message says");
  tensor t = m.take(*d);
  refused(*d, "does not follow");  // the same piece twice
  BOOST_TEST(same_bits(t, ramp(16, 1.0f)));
}

BOOST_AUTO_TEST_CASE(another_ranks_or_another_jobs_mailbox_is_refused) {
  const std::string tag = fresh_shm_tag();
  auto o = shm::ring_outbox::create(tag, 1 << 12, sender_rank);
  BOOST_REQUIRE(o.has_value());
  auto wrong_rank = shm::ring_inbox::open(o->name(), tag, sender_rank + 1);
  BOOST_REQUIRE(!wrong_rank.has_value());
  BOOST_TEST(wrong_rank.error().message.find("made by ring rank 2, not by 3") != std::string::npos);
  BOOST_TEST(!shm::ring_inbox::open(o->name(), fresh_shm_tag(), sender_rank).has_value());
}

BOOST_AUTO_TEST_CASE(a_nonsense_release_closes_the_outbox) {
  mailbox_pair m(16, 4);
  auto d = m.out.put(ramp(16, 1.0f));
  BOOST_REQUIRE(d.has_value());
  auto seg = shm::segment::open(d->segment, m.tag);
  BOOST_REQUIRE(!seg.has_value());  // its name is gone once accepted; write through a taken piece instead
  tensor t = m.take(*d);
  // The control line sits just before the first piece's header.
  auto* released = reinterpret_cast<std::uint64_t*>(t.bytes() - 64 - 64);
  std::atomic_ref<std::uint64_t>(*released).store(d->ticket + 4096);  // beyond what was written
  BOOST_TEST(!m.out.put(ramp(16, 2.0f)).has_value());
  BOOST_TEST(m.out.closed());
  BOOST_TEST(!m.out.put(ramp(16, 2.0f)).has_value());
}

BOOST_AUTO_TEST_CASE(pieces_outlive_the_inbox) {
  mailbox_pair m(32, 4);
  auto d = m.out.put(ramp(32, 3.0f));
  BOOST_REQUIRE(d.has_value());
  tensor t = m.take(*d);
  m.in.reset();
  BOOST_TEST(same_bits(t, ramp(32, 3.0f)));
  t = tensor{};  // releases into the mapping it kept alive
  BOOST_TEST(m.out.put(ramp(32, 3.0f)).has_value());
}
