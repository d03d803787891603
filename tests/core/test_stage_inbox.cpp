// Tests for core/stage_inbox.cpp: early tensors wait by (step, microbatch); a step
// behind the receiver or two ahead, a microbatch the step does not have, a wrong shape or
// dtype, NaN, and a second copy are each refused with their own errc and never filed.
#define BOOST_TEST_MODULE stage_inbox
#include <boost/test/unit_test.hpp>

#include <limits>

#include "core/stage_inbox.hpp"

using namespace troupe;

namespace {

// 100 samples per worker, batches of 32: steps of 32, 32, 32 and 4 rows; 4 microbatches.
job_spec small_job() {
  job_spec j;
  j.workers = 1;
  j.train_size = 100;
  j.train.batch_size = 32;
  j.microbatches = 4;
  return j;
}

tensor rows(std::int64_t n, std::int64_t width = 6) { return tensor({n, width}); }

}  // namespace

BOOST_AUTO_TEST_CASE(files_this_step_and_the_next_and_hands_them_out_once) {
  stage_inbox box(small_job(), shape{6}, "activation");
  BOOST_TEST(!box.file(5, 1, 5, 2, rows(8)).has_value());
  BOOST_TEST(!box.file(5, 1, 6, 0, rows(8)).has_value());  // the next step: early, kept
  BOOST_TEST(box.size() == 2u);
  BOOST_TEST(box.holds(5, 2));
  BOOST_TEST(box.holds(6, 0));
  BOOST_TEST(!box.holds(5, 1));
  BOOST_TEST(!box.take(5, 1).has_value());
  auto t = box.take(5, 2);
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(t->size(0) == 8);
  BOOST_TEST(!box.holds(5, 2));  // handed out
  BOOST_TEST(!box.take(5, 2).has_value());
  BOOST_TEST(box.size() == 1u);
}

BOOST_AUTO_TEST_CASE(the_short_last_step_has_its_own_microbatches) {
  stage_inbox box(small_job(), shape{6}, "activation");
  // Step 3 of the epoch has 4 rows: 4 microbatches of one row.
  BOOST_TEST(!box.file(3, 3, 3, 3, rows(1)).has_value());
  const auto wrong = box.file(3, 3, 3, 2, rows(8));
  BOOST_REQUIRE(wrong.has_value());
  BOOST_TEST((wrong->code == errc::bad_shape));
  BOOST_TEST(wrong->detail.find("expected f32(1, 6)") != std::string::npos, wrong->detail);
}

BOOST_AUTO_TEST_CASE(each_bad_tensor_is_refused_with_its_own_code) {
  stage_inbox box(small_job(), shape{6}, "activation gradient");
  auto code_of = [&](std::int64_t step, std::int32_t mb, tensor t) {
    auto r = box.file(5, 1, step, mb, std::move(t));
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->detail.find("activation gradient") != std::string::npos);
    return r->code;
  };
  BOOST_TEST((code_of(4, 0, rows(8)) == errc::bad_clock));   // a step the stage has finished
  BOOST_TEST((code_of(7, 0, rows(8)) == errc::bad_clock));   // two steps ahead
  BOOST_TEST((code_of(5, 4, rows(8)) == errc::bad_shape));   // no microbatch 4
  BOOST_TEST((code_of(5, -1, rows(8)) == errc::bad_shape));
  BOOST_TEST((code_of(5, 0, rows(8, 5)) == errc::bad_shape));
  BOOST_TEST((code_of(5, 0, tensor({8, 6}, dtype::i32)) == errc::bad_shape));
  BOOST_TEST((code_of(5, 0, tensor()) == errc::bad_shape));
  tensor nan = rows(8);
  nan.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST((code_of(5, 0, std::move(nan)) == errc::diverged));
  BOOST_TEST(box.size() == 0u);
  BOOST_TEST(!box.file(5, 1, 5, 0, rows(8)).has_value());
  BOOST_TEST((code_of(5, 0, rows(8)) == errc::duplicate));
  BOOST_TEST(box.size() == 1u);
}
