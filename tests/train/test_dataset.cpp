// Tests for train/dataset.cpp: the real Fashion-MNIST (Debian's dataset-fashion-mnist,
// which tools/dev installs) loads with the right sizes and normalisation, a missing
// directory says where it looked and how to get the data, and the synthetic set is
// deterministic.
#define BOOST_TEST_MODULE dataset
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>

#include "train/dataset.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(fashion_mnist_loads_and_is_normalised) {
  auto d = load_fashion_mnist(std::string(default_fashion_mnist_dir));
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  BOOST_TEST(d->train.size() == 60000);
  BOOST_TEST(d->test.size() == 10000);
  BOOST_TEST(d->train.sample_shape() == (shape{1, 28, 28}));
  BOOST_TEST(d->train.num_classes == 10);
  // Fashion-MNIST's published pixel statistics.
  BOOST_TEST(d->pixel_mean == 0.2860f, boost::test_tools::tolerance(1e-3f));
  BOOST_TEST(d->pixel_std == 0.3530f, boost::test_tools::tolerance(1e-3f));
  double sum = 0, sq = 0;
  const float* x = d->train.images.data<float>();
  for (std::int64_t i = 0; i < d->train.images.numel(); ++i) {
    sum += x[i];
    sq += static_cast<double>(x[i]) * x[i];
  }
  const double n = static_cast<double>(d->train.images.numel());
  BOOST_TEST(std::abs(sum / n) < 1e-4);
  BOOST_TEST(sq / n == 1.0, boost::test_tools::tolerance(1e-3));
  std::int64_t per_class[10] = {};
  for (std::int64_t i = 0; i < d->train.size(); ++i) ++per_class[d->train.labels.data<std::int32_t>()[i]];
  for (auto c : per_class) BOOST_TEST(c == 6000);
}

BOOST_AUTO_TEST_CASE(missing_directory_says_how_to_get_the_data) {
  auto d = load_fashion_mnist("/nonexistent/troupe-data");
  BOOST_REQUIRE(!d.has_value());
  const auto& m = d.error().message;
  BOOST_TEST(m.find("/nonexistent/troupe-data") != std::string::npos);
  BOOST_TEST(m.find("train-images-idx3-ubyte.gz") != std::string::npos);
  BOOST_TEST(m.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  BOOST_TEST(m.find("--data") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(synthetic_is_deterministic_and_balanced) {
  auto a = make_synthetic(2000, 500, 5), b = make_synthetic(2000, 500, 5), c = make_synthetic(2000, 500, 6);
  BOOST_TEST(a.train.size() == 2000);
  BOOST_TEST(a.test.size() == 500);
  BOOST_TEST(std::memcmp(a.train.images.bytes(), b.train.images.bytes(), a.train.images.nbytes()) == 0);
  BOOST_TEST(std::memcmp(a.train.images.bytes(), c.train.images.bytes(), a.train.images.nbytes()) != 0);
  std::int64_t per_class[10] = {};
  for (std::int64_t i = 0; i < a.train.size(); ++i) ++per_class[a.train.labels.data<std::int32_t>()[i]];
  for (auto n : per_class) BOOST_TEST((n > 150 && n < 250));
}

BOOST_AUTO_TEST_CASE(head_takes_the_first_samples) {
  auto s = make_synthetic(100, 10, 1);
  dataset h = head(s.train, 7);
  BOOST_TEST(h.size() == 7);
  BOOST_TEST(std::memcmp(h.images.bytes(), s.train.images.bytes(), h.images.nbytes()) == 0);
  BOOST_TEST(head(s.train, 0).size() == 100);
  BOOST_TEST(head(s.train, 1000).size() == 100);
}

BOOST_AUTO_TEST_CASE(dataset_names_parse) {
  BOOST_TEST((*parse_dataset_kind("synthetic") == dataset_kind::synthetic));
  BOOST_TEST((*parse_dataset_kind("fortunes") == dataset_kind::fortunes));
  BOOST_TEST((*parse_dataset_kind("text:/tmp/a.txt") == dataset_kind::text));
  BOOST_TEST(!parse_dataset_kind("text:").has_value());
  BOOST_TEST(parse_dataset_kind("cifar").error().message.find("fashion-mnist, synthetic, fortunes or text:FILE") !=
             std::string::npos);
}
