// Tests for actors/wire.cpp and wire.hpp: tensors cross the wire as raw blobs and come
// back bit for bit; a header that lies (byte order, dtype, size, extents) is a decode
// error, not a corrupted tensor or a huge allocation; messages round-trip field for field,
// and a ring piece cut short does not decode.
#define BOOST_TEST_MODULE wire
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "tests/support/caf_fixture.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

std::vector<char> serialize(caf::actor_system& sys, tensor t) {
  std::vector<char> buf;
  caf::binary_serializer bs{sys, buf};
  auto err = inspect(bs, t);
  BOOST_REQUIRE(!err);
  return buf;
}

caf::error deserialize(caf::actor_system& sys, const std::vector<char>& buf, tensor& out) {
  caf::binary_deserializer bd{sys, buf};
  return inspect(bd, out);
}

// x serialized and deserialized again, as another node would see it.
template <class T>
T round_trip(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer bs{sys, buf};
  BOOST_REQUIRE(!inspect(bs, x));
  T back;
  caf::binary_deserializer bd{sys, buf};
  BOOST_REQUIRE(!inspect(bd, back));
  return back;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(wire, test::threaded_system)

BOOST_AUTO_TEST_CASE(tensors_round_trip_as_raw_blobs) {
  tensor t = test::random_tensor({2, 3, 50}, 1);
  auto buf = serialize(*sys, t);
  // dtype, order and rank bytes, three extents, the byte count, and the payload: nothing per element.
  BOOST_TEST(buf.size() == 3 + 3 * 8 + 8 + t.nbytes());
  tensor back;
  BOOST_REQUIRE(!deserialize(*sys, buf, back));
  BOOST_TEST(back.sizes() == t.sizes());
  BOOST_TEST(std::memcmp(back.bytes(), t.bytes(), t.nbytes()) == 0);
  tensor ints({4}, dtype::i32);
  ints.data<std::int32_t>()[2] = -7;
  tensor ints_back;
  BOOST_REQUIRE(!deserialize(*sys, serialize(*sys, ints), ints_back));
  BOOST_TEST((ints_back.type() == dtype::i32));
  BOOST_TEST(ints_back.data<std::int32_t>()[2] == -7);
  tensor empty_back = tensor({1});
  BOOST_REQUIRE(!deserialize(*sys, serialize(*sys, tensor()), empty_back));
  BOOST_TEST(empty_back.empty());
}

BOOST_AUTO_TEST_CASE(lying_headers_are_decode_errors) {
  const auto good = serialize(*sys, test::random_tensor({4, 4}, 2));
  auto expect_malformed = [&](std::vector<char> buf, const char* what) {
    tensor out;
    auto err = deserialize(*sys, buf, out);
    BOOST_TEST_CONTEXT(what) {
      BOOST_REQUIRE(err);
      BOOST_TEST((troupe_code(err) == errc::malformed || err.category() == caf::atom("system")), describe(err));
    }
  };
  auto order = good;
  order[1] = 2;  // big-endian peer
  expect_malformed(order, "byte order");
  auto type = good;
  type[0] = 9;
  expect_malformed(type, "dtype");
  auto rank = good;
  rank[2] = 9;
  expect_malformed(rank, "rank");
  auto size = good;
  size[3 + 2 * 8] ^= 1;  // the byte count no longer matches the shape
  expect_malformed(size, "byte count");
  auto huge = good;
  // GCC 12 inlines the eight stores as a memset and warns about a region of size 0 it
  // cannot see is `good`'s copy (-Wstringop-overflow false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
  for (int i = 0; i < 8; ++i) huge[3 + i] = static_cast<char>(0x7f);  // an extent near 2^63
#pragma GCC diagnostic pop
  expect_malformed(huge, "extent");
  auto truncated = good;
  truncated.resize(truncated.size() - 5);
  expect_malformed(truncated, "truncated payload");
}

BOOST_AUTO_TEST_CASE(messages_round_trip) {
  kv_push p = step_push(3, 7, 2, 11, 9, test::random_tensor({16}, 3));
  p.piece_offset = 5;
  p.piece_numel = 16;
  const kv_push q = round_trip(*sys, p);
  BOOST_TEST(q.shard == 3u);
  BOOST_TEST(q.worker == 7u);
  BOOST_TEST(q.clock == 11);
  BOOST_TEST(q.states_clock());
  BOOST_TEST((q.parts == std::vector<kv_part_id>{stage_part(2)}));
  BOOST_TEST((q.base_versions == std::vector<std::int64_t>{9}));
  BOOST_TEST(q.piece_offset == 5);
  BOOST_TEST(q.piece_numel == 16);
  BOOST_TEST(std::memcmp(q.data.bytes(), p.data.bytes(), p.data.nbytes()) == 0);
  BOOST_TEST(q.shared.empty());
  // A user's loop's push states no clock.
  BOOST_TEST(!round_trip(*sys, kv_push{}).states_clock());
  // A gradient left in shared memory travels as its descriptor alone.
  kv_push shared = step_push(1, 2, 0, 3, 4, tensor());
  shared.shared = {"/troupe-0123456789abcdef-1-2-deadbeef", 128, 4096, 17, 0, {32, 8}};
  const kv_push r = round_trip(*sys, shared);
  BOOST_TEST(r.data.empty());
  BOOST_TEST(r.shared.segment == shared.shared.segment);
  BOOST_TEST(r.shared.offset == 128u);
  BOOST_TEST(r.shared.capacity == 4096u);
  BOOST_TEST(r.shared.ticket == 17u);
  BOOST_TEST((r.shared.dims == std::vector<std::int64_t>{32, 8}));
  kv_pull asked = step_pull(0, 1, 3, 2, true);
  asked.reply_to = shared.shared;
  asked.piece_offset = 4;
  asked.piece_numel = 8;
  const kv_pull pr = round_trip(*sys, asked);
  BOOST_TEST(pr.reply_to.segment == shared.shared.segment);
  BOOST_TEST(pr.full);
  BOOST_TEST(pr.clock == 2);
  BOOST_TEST((pr.parts == std::vector<kv_part_id>{stage_part(3)}));
  BOOST_TEST(pr.piece_offset == 4);
  BOOST_TEST(pr.piece_numel == 8);
  BOOST_TEST(!round_trip(*sys, kv_pull{}).states_clock());
  job_spec j;
  j.job_id = "abc";
  j.mode = sync_mode::ssp;
  j.input_shape = {1, 28, 28};
  j.train.lr = 0.125f;
  const job_spec k = round_trip(*sys, j);
  BOOST_TEST(k.job_id == "abc");
  BOOST_TEST((k.mode == sync_mode::ssp));
  BOOST_TEST(k.input_shape == j.input_shape);
  BOOST_TEST(k.train.lr == 0.125f);
  member_assignment a;
  a.rank = 5;
  a.prev_host = "10.0.0.2";
  a.next_port = 7001;
  a.group = {4, 5};
  a.ring = {0, 4, 6};
  a.shard_hosts = {"h"};
  const member_assignment b = round_trip(*sys, a);
  BOOST_TEST(b.rank == 5u);
  BOOST_TEST(b.prev_host == "10.0.0.2");
  BOOST_TEST(b.next_port == 7001);
  BOOST_TEST((b.group == std::vector<std::uint32_t>{4, 5}));
  BOOST_TEST((b.ring == std::vector<std::uint32_t>{0, 4, 6}));
  BOOST_TEST((b.shard_hosts == std::vector<std::string>{"h"}));
}

BOOST_AUTO_TEST_CASE(ring_pieces_round_trip_with_their_values_as_a_blob_or_their_mailbox_descriptor) {
  ring_piece p;
  p.collective = 41;
  p.phase = ring_phase::all_gather;
  p.chunk = 3;
  p.offset = 1'000'000;
  p.values = test::random_tensor({257}, 5);
  const ring_piece q = round_trip(*sys, p);
  BOOST_TEST(q.collective == 41u);
  BOOST_TEST((q.phase == ring_phase::all_gather));
  BOOST_TEST(q.chunk == 3u);
  BOOST_TEST(q.offset == 1'000'000);
  BOOST_TEST(q.values.numel() == 257);
  BOOST_TEST(std::memcmp(q.values.bytes(), p.values.bytes(), p.values.nbytes()) == 0);
  BOOST_TEST(q.shared.empty());
  // In a ring mailbox: the descriptor instead of the values (Note [Ring mailboxes]).
  ring_piece m = p;
  m.values = tensor{};
  m.shared = shared_tensor{"/troupe-0123456789abcdef-7-1-cafe0123", 4096, 1152, 5248, 0, {257}};
  const ring_piece n = round_trip(*sys, m);
  BOOST_TEST(n.values.empty());
  BOOST_TEST(n.shared.segment == m.shared.segment);
  BOOST_TEST(n.shared.offset == 4096u);
  BOOST_TEST(n.shared.ticket == 5248u);
  BOOST_TEST((n.shared.dims == std::vector<std::int64_t>{257}));
  // Cut short anywhere, it does not decode.
  std::vector<char> buf;
  caf::binary_serializer bs{*sys, buf};
  BOOST_REQUIRE(!inspect(bs, p));
  for (std::size_t keep : {std::size_t{0}, std::size_t{5}, buf.size() / 2, buf.size() - 1}) {
    const std::vector<char> cut(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(keep));
    ring_piece back;
    caf::binary_deserializer bd{*sys, cut};
    BOOST_TEST(static_cast<bool>(inspect(bd, back)), "decoded from " << keep << " of " << buf.size() << " bytes");
  }
}

BOOST_AUTO_TEST_SUITE_END()
