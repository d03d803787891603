// member_data: a member's dataset, alone. The job's training set is taken only when its
// size and --augment fit the job, and each refusal says which and names the member; a
// producer's own error reaches the caller; gather copies exactly the rows asked for, in
// their order, and flips only when told to augment.
#define BOOST_TEST_MODULE member_data
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "core/member_data.hpp"

using namespace troupe;

namespace {

constexpr std::int64_t train_size = 40;

job_spec data_job() {
  job_spec j;
  j.job_id = "data-under-test";
  j.train_size = train_size;
  j.train.seed = 3;
  return j;
}

dataset_producer synthetic_of(std::int64_t n) {
  return [n](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> {
    return std::make_shared<const dataset_split>(make_synthetic(n, 10, 11));
  };
}

// Sample `row` of `t` (N, ...) as floats.
std::vector<float> row_of(const_tensor_view t, std::int64_t row) {
  const std::int64_t per = t.numel() / t.size(0);
  const float* p = t.data<float>() + row * per;
  return {p, p + per};
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_training_set_of_another_size_is_refused_naming_the_member) {
  member_data d;
  auto f = d.take(data_job(), synthetic_of(train_size + 1), "worker 2");
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::bad_job));
  BOOST_TEST(f->detail == "worker 2's training set has 41 samples but the job has 40");
  BOOST_TEST(!d.taken());
  BOOST_TEST(d.train_size() == 0);
}

BOOST_AUTO_TEST_CASE(an_augmentation_the_data_cannot_take_is_refused) {
  job_spec job = data_job();
  job.train.augment = "shift";  // a text's windows; these are images
  member_data d;
  auto f = d.take(job, synthetic_of(train_size), "worker 0");
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::bad_job));
  BOOST_TEST(f->detail.find("shift") != std::string::npos, f->detail);
  BOOST_TEST(!d.taken());
  job.train.augment = "spin";
  f = d.take(job, synthetic_of(train_size), "worker 0");
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST(f->detail.find("spin") != std::string::npos, f->detail);
}

BOOST_AUTO_TEST_CASE(the_producers_error_is_passed_on) {
  member_data d;
  auto f = d.take(data_job(),
                  [](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> {
                    return failure{"no dataset at /nowhere"};
                  },
                  "worker 0");
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::bad_job));
  BOOST_TEST(f->detail == "no dataset at /nowhere");
}

BOOST_AUTO_TEST_CASE(gather_copies_the_rows_asked_for_and_flips_only_when_told) {
  const auto split = std::make_shared<const dataset_split>(make_synthetic(train_size, 10, 11));
  auto same = [&](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> { return split; };
  job_spec job = data_job();
  job.train.augment = "flip";
  member_data d;
  BOOST_REQUIRE(!d.take(job, same, "worker 0"));
  BOOST_TEST(d.train_size() == train_size);
  d.allocate(4);
  const std::vector<std::int64_t> idx{7, 0, 39};
  d.gather(idx, false, job.train.seed, 0);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const auto want = row_of(split->train.images.view(), idx[i]);
    BOOST_TEST(row_of(d.inputs(3), static_cast<std::int64_t>(i)) == want, "row " << i);
    BOOST_TEST(d.labels(3).data<std::int32_t>()[i] == split->train.labels.data<std::int32_t>()[idx[i]]);
  }
  // Told to augment, a flip (drawn per sample and epoch) changes some of the rows.
  bool any_changed = false;
  for (std::int64_t epoch = 0; epoch < 4 && !any_changed; ++epoch) {
    d.gather(idx, true, job.train.seed, epoch);
    for (std::size_t i = 0; i < idx.size(); ++i)
      any_changed = any_changed ||
                    row_of(d.inputs(3), static_cast<std::int64_t>(i)) != row_of(split->train.images.view(), idx[i]);
  }
  BOOST_TEST(any_changed);
}
