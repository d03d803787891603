// Tests for train/chance_watch.cpp (Note [Accuracy at chance]): a run that learned and
// then fell to chance is said to have collapsed, one at chance from its first epoch not
// to have learned; a healthy or NaN epoch, and a model of one class, say nothing; the
// first epoch at chance is kept.
#define BOOST_TEST_MODULE chance_watch
#include <boost/test/unit_test.hpp>
#include <limits>

#include "train/chance_watch.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(a_collapse_names_the_best_epoch_and_what_to_change) {
  chance_watch w;
  BOOST_TEST(!w.check(0, 0.80, 0.6, 10).has_value());
  BOOST_TEST(!w.check(1, 0.86, 0.4, 10).has_value());
  BOOST_TEST(w.first_chance_epoch() == -1);
  auto why = w.check(2, 0.1, 2.3026, 10);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("epoch 3: test accuracy 10.00% is chance for 10 classes while the training loss stayed "
                       "finite (2.3026)") == 0u,
             *why);
  BOOST_TEST(why->find("the run collapsed (it reached 86.00% at epoch 2)") != std::string::npos, *why);
  BOOST_TEST(why->find("lower --lr or lengthen --warmup-epochs") != std::string::npos, *why);
  BOOST_TEST(w.check(3, 0.12, 2.3, 10).has_value());
  BOOST_TEST(w.first_chance_epoch() == 2);  // the first one is kept
}

BOOST_AUTO_TEST_CASE(a_run_at_chance_from_the_start_has_not_learned) {
  chance_watch w;
  auto why = w.check(0, 0.107, 3.06, 10);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("the run has not learned") != std::string::npos, *why);
  BOOST_TEST(w.first_chance_epoch() == 0);
}

BOOST_AUTO_TEST_CASE(healthy_nan_and_one_class_epochs_say_nothing) {
  chance_watch w;
  BOOST_TEST(!w.check(0, 0.151, 2.0, 10).has_value());                                     // just above 1.5 / classes
  BOOST_TEST(!w.check(1, 0.1, std::numeric_limits<double>::quiet_NaN(), 10).has_value());  // the loss check's case
  BOOST_TEST(!w.check(2, 0.5, 0.7, 1).has_value());
  BOOST_TEST(w.first_chance_epoch() == -1);
  BOOST_TEST(w.check(3, 0.01, 4.0, 113).has_value());  // a text: chance is 1 / vocabulary
}
