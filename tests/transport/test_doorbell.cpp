// Tests for transport/doorbell.cpp: records come out of a bell queue in the order they were
// posted, bit for bit, also across the ring's wrap; a full ring and an oversized record are
// refused without writing; counts or lengths that a broken writer left are reported as
// corrupt and take nothing; unread() and the count to wait on; the listening mark; both
// queues of a block are separate.
#define BOOST_TEST_MODULE doorbell
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <vector>

#include "transport/doorbell.hpp"

using namespace troupe;
using shm::bell_block;
using shm::bell_queue;

namespace {

struct memory {
  alignas(64) std::vector<std::byte> bytes;
  explicit memory(std::size_t n) : bytes(n + 64) {}
  std::byte* base() {
    auto p = reinterpret_cast<std::uintptr_t>(bytes.data());
    return bytes.data() + ((64 - p % 64) % 64);
  }
};

std::vector<std::byte> record(std::size_t n, int seed) {
  std::vector<std::byte> r(n);
  for (std::size_t i = 0; i < n; ++i) r[i] = static_cast<std::byte>((seed * 31 + i) & 0xff);
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(records_come_out_in_order_across_the_wrap) {
  memory m(bell_queue::bytes());
  bell_queue writer(m.base()), reader(m.base());
  bool corrupt = true;
  BOOST_TEST(!reader.take(corrupt).has_value());
  BOOST_TEST(!corrupt);
  for (int i = 0; i < 3 * static_cast<int>(shm::bell_records) + 1; ++i) {
    auto r = record(static_cast<std::size_t>(i * 37 % static_cast<int>(shm::bell_record_payload)), i);
    BOOST_REQUIRE(writer.post(r));
    auto got = reader.take(corrupt);
    BOOST_REQUIRE(got.has_value());
    BOOST_TEST(!corrupt);
    BOOST_TEST((*got == r));
  }
  BOOST_TEST(*writer.posted_word() == 3 * shm::bell_records + 1);
}

BOOST_AUTO_TEST_CASE(a_full_ring_and_an_oversized_record_are_refused) {
  memory m(bell_queue::bytes());
  bell_queue q(m.base());
  for (std::size_t i = 0; i < shm::bell_records; ++i) BOOST_REQUIRE(q.post(record(10, static_cast<int>(i))));
  BOOST_TEST(!q.post(record(10, 99)));
  bool corrupt = false;
  auto first = q.take(corrupt);
  BOOST_REQUIRE(first.has_value());
  BOOST_TEST((*first == record(10, 0)));
  BOOST_TEST(q.post(record(10, 4)));  // room again
  BOOST_TEST(!q.post(record(shm::bell_record_payload + 1, 5)));
  BOOST_TEST(q.post(record(shm::bell_record_payload, 6)) == false);  // still full: 4 posted, 1 taken
  for (int i = 1; i <= 4; ++i) {
    auto got = q.take(corrupt);
    BOOST_REQUIRE(got.has_value());
    BOOST_TEST((*got == record(10, i)));
  }
  BOOST_TEST(q.post(record(shm::bell_record_payload, 6)));
  auto big = q.take(corrupt);
  BOOST_REQUIRE(big.has_value());
  BOOST_TEST(big->size() == shm::bell_record_payload);
}

BOOST_AUTO_TEST_CASE(a_broken_writers_counts_or_lengths_are_corrupt_and_take_nothing) {
  memory m(bell_queue::bytes());
  bell_queue q(m.base());
  bool corrupt = false;
  *q.posted_word() = shm::bell_records + 1;  // more than a full ring
  BOOST_TEST(!q.take(corrupt).has_value());
  BOOST_TEST(corrupt);

  memory m2(bell_queue::bytes());
  bell_queue q2(m2.base());
  BOOST_REQUIRE(q2.post(record(8, 1)));
  const std::uint64_t too_long = shm::bell_record_payload + 1;
  std::memcpy(m2.base() + 128, &too_long, sizeof too_long);  // the first record's length
  BOOST_TEST(!q2.take(corrupt).has_value());
  BOOST_TEST(corrupt);
}

BOOST_AUTO_TEST_CASE(a_block_marks_listening_and_keeps_its_queues_apart) {
  memory m(bell_block::bytes());
  bell_block member(m.base()), shard(m.base());
  BOOST_TEST(!member.listening());
  shard.set_listening();
  BOOST_TEST(member.listening());
  BOOST_REQUIRE(member.requests().post(record(20, 1)));
  BOOST_REQUIRE(shard.answers().post(record(30, 2)));
  bool corrupt = false;
  auto req = shard.requests().take(corrupt);
  auto ans = member.answers().take(corrupt);
  BOOST_REQUIRE(req.has_value());
  BOOST_REQUIRE(ans.has_value());
  BOOST_TEST((*req == record(20, 1)));
  BOOST_TEST((*ans == record(30, 2)));
  BOOST_TEST(!shard.requests().take(corrupt).has_value());
}

BOOST_AUTO_TEST_CASE(unread_says_whether_a_record_waits_and_which_count_to_wait_on) {
  memory m(bell_queue::bytes());
  bell_queue writer(m.base()), reader(m.base());
  std::uint32_t count = 99;
  BOOST_TEST(!reader.unread(count));
  BOOST_TEST(count == 0u);
  BOOST_REQUIRE(writer.post(record(10, 1)));
  BOOST_REQUIRE(writer.post(record(20, 2)));
  BOOST_TEST(reader.unread(count));
  BOOST_TEST(count == 2u);
  bool corrupt = false;
  BOOST_REQUIRE(reader.take(corrupt).has_value());
  BOOST_TEST(reader.unread(count));  // one more waits
  BOOST_REQUIRE(reader.take(corrupt).has_value());
  BOOST_TEST(!reader.unread(count));
  BOOST_TEST(count == 2u);  // the count a wait for the next record names
}
