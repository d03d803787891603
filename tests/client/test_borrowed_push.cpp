// Tests for client/borrowed_push: the message's tensor reads the caller's floats in place,
// the completion waits for both the shard's answer and the tensor's release, and the ledger
// counts what is still borrowed.
#define BOOST_TEST_MODULE borrowed_push
#include <boost/test/unit_test.hpp>

#include <future>
#include <vector>

#include "client/borrowed_push.hpp"

using namespace troupe;
using namespace troupe::kv;

namespace {

struct recorder {
  int calls = 0;
  std::optional<fault> error;
  std::vector<part_result> results;
  completion done() {
    return [this](std::optional<fault> f, std::vector<part_result> r) {
      ++calls;
      error = std::move(f);
      results = std::move(r);
    };
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_tensor_reads_the_callers_floats_without_a_copy) {
  std::vector<float> grads{1.f, 2.f, 3.f, 4.f};
  recorder rec;
  auto b = std::make_shared<borrowed_push>(rec.done());
  tensor t = borrowed_push::lend(b, grads.data(), 4);
  BOOST_TEST(t.numel() == 4);
  BOOST_TEST((t.type() == dtype::f32));
  BOOST_TEST(reinterpret_cast<const void*>(t.bytes()) == reinterpret_cast<const void*>(grads.data()));
  grads[2] = 30.f;  // what the message serializes is the caller's memory as it is then
  BOOST_TEST(t.data<float>()[2] == 30.f);
}

BOOST_AUTO_TEST_CASE(an_answer_before_the_release_completes_at_the_release) {
  std::vector<float> grads(8, 1.f);
  recorder rec;
  auto b = std::make_shared<borrowed_push>(rec.done());
  {
    tensor t = borrowed_push::lend(b, grads.data(), 8);
    b->answered(std::nullopt, {{7, 3, 1}});
    BOOST_TEST(rec.calls == 0);  // the message still holds the caller's floats
  }
  BOOST_TEST(rec.calls == 1);
  BOOST_TEST(!rec.error);
  BOOST_REQUIRE(rec.results.size() == 1u);
  BOOST_TEST(rec.results[0].part == 7u);
  BOOST_TEST(rec.results[0].version == 3);
  BOOST_TEST(rec.results[0].staleness == 1);
  BOOST_TEST(grads[0] == 1.f);  // released without writing or freeing the caller's memory
}

BOOST_AUTO_TEST_CASE(a_release_before_the_answer_completes_at_the_answer_with_its_fault) {
  std::vector<float> grads(8, 1.f);
  recorder rec;
  auto b = std::make_shared<borrowed_push>(rec.done());
  { tensor t = borrowed_push::lend(b, grads.data(), 8); }
  BOOST_TEST(rec.calls == 0);
  b->answered(fault{errc::not_finite, "the gradient holds NaN"}, {});
  BOOST_TEST(rec.calls == 1);
  BOOST_REQUIRE(rec.error.has_value());
  BOOST_TEST((rec.error->code == errc::not_finite));
  BOOST_TEST(rec.error->detail == "the gradient holds NaN");
}

BOOST_AUTO_TEST_CASE(a_deep_copy_of_the_message_owns_its_floats) {
  std::vector<float> grads{5.f, 6.f};
  recorder rec;
  auto b = std::make_shared<borrowed_push>(rec.done());
  tensor t = borrowed_push::lend(b, grads.data(), 2);
  tensor copied = t;  // CAF copies a message it must change while shared
  BOOST_TEST(reinterpret_cast<const void*>(copied.bytes()) != reinterpret_cast<const void*>(grads.data()));
  BOOST_TEST(copied.data<float>()[1] == 6.f);
  t = tensor();
  b->answered(std::nullopt, {});
  BOOST_TEST(rec.calls == 1);  // the copy holds nothing of the caller's
}

BOOST_AUTO_TEST_CASE(only_parts_back_to_back_in_memory_are_borrowed_as_one) {
  std::vector<float> a(10), other(3);
  BOOST_TEST(contiguous_floats({}) == nullptr);
  BOOST_TEST(contiguous_floats({{1, 0, a.data(), 10}}) == a.data());
  BOOST_TEST(contiguous_floats({{1, 0, a.data(), 4}, {2, 0, a.data() + 4, 6}}) == a.data());
  BOOST_TEST(contiguous_floats({{1, 0, a.data(), 4}, {2, 0, a.data() + 5, 5}}) == nullptr);
  BOOST_TEST(contiguous_floats({{1, 0, a.data(), 10}, {2, 0, other.data(), 3}}) == nullptr);
}

BOOST_AUTO_TEST_CASE(the_ledger_counts_what_is_still_borrowed) {
  std::vector<float> grads(4, 1.f);
  auto ledger = std::make_shared<borrow_ledger>();
  BOOST_TEST(ledger->wait_all_returned(std::chrono::milliseconds(0)));
  recorder rec;
  auto b = std::make_shared<borrowed_push>(rec.done(), ledger);
  tensor t = borrowed_push::lend(b, grads.data(), 4);
  BOOST_TEST(!ledger->wait_all_returned(std::chrono::milliseconds(20)));  // a close would wait for it
  t = tensor();
  BOOST_TEST(ledger->wait_all_returned(std::chrono::milliseconds(0)));
  BOOST_TEST(rec.calls == 0);  // released, not yet answered
}

BOOST_AUTO_TEST_CASE(the_release_leaves_the_callers_memory_it_was_entered_for) {
  std::vector<float> grads(4, 1.f);
  auto memory = std::make_shared<caller_memory>();
  BOOST_TEST(memory->enter());  // the transport enters for the borrow
  recorder rec;
  auto b = std::make_shared<borrowed_push>(rec.done(), nullptr, memory);
  tensor t = borrowed_push::lend(b, grads.data(), 4);
  auto revoking = std::async(std::launch::async, [&] { memory->revoke(); });
  BOOST_TEST((revoking.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout));  // still borrowed
  t = tensor();
  BOOST_TEST((revoking.wait_for(std::chrono::seconds(10)) == std::future_status::ready));
}
