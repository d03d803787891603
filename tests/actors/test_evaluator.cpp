// Tests for actors/evaluator.cpp: the actor's score equals evaluate() on the same
// parameters, a parameter vector of the wrong size is a typed error, and so is an
// evaluation that throws.
#define BOOST_TEST_MODULE evaluator
#include <boost/test/unit_test.hpp>

#include "actors/evaluator.hpp"
#include "tests/support/caf_fixture.hpp"
#include "train/evaluate.hpp"

using namespace troupe;

BOOST_FIXTURE_TEST_CASE(scores_like_evaluate_and_rejects_wrong_sizes, test::threaded_system) {
  auto data = std::make_shared<const dataset_split>(make_synthetic(10, 300, 2));
  model m = *model::build(*parse_model_spec("mlp:784-16-10"), {1, 28, 28}, 10);
  tensor params({m.num_params()});
  m.init_params(params, 4);
  const eval_result direct = evaluate(m, params, data->test);
  auto ev = spawn_evaluator(*sys, m, data);
  caf::scoped_actor self{*sys};
  self->request(ev, std::chrono::seconds(30), eval_atom::value, eval_request{3, params})
      .receive(
          [&](const eval_reply& r) {
            BOOST_TEST(r.epoch == 3);
            BOOST_TEST(r.accuracy == direct.accuracy);
            BOOST_TEST(r.loss == direct.loss);
          },
          [&](caf::error& e) { BOOST_FAIL(describe(e)); });
  self->request(ev, std::chrono::seconds(30), eval_atom::value, eval_request{0, tensor({5})})
      .receive([&](const eval_reply&) { BOOST_FAIL("a wrong-size vector was scored"); },
               [&](caf::error& e) { BOOST_TEST((troupe_code(e) == errc::bad_shape)); });
  self->send_exit(ev, caf::exit_reason::user_shutdown);
}

// Test images of 1x14x14 for a model of 1x28x28: the forward pass's check throws, and the
// evaluator answers with compute_failed naming the epoch instead of dying.
BOOST_FIXTURE_TEST_CASE(an_evaluation_that_throws_is_a_typed_error, test::threaded_system) {
  auto data = std::make_shared<dataset_split>(make_synthetic(10, 30, 2));
  data->test.images = tensor({30, 1, 14, 14});
  model m = *model::build(*parse_model_spec("mlp:784-16-10"), {1, 28, 28}, 10);
  auto ev = spawn_evaluator(*sys, m, data);
  caf::scoped_actor self{*sys};
  self->request(ev, std::chrono::seconds(30), eval_atom::value, eval_request{2, tensor({m.num_params()})})
      .receive([&](const eval_reply&) { BOOST_FAIL("a mis-shaped test set was scored"); },
               [&](caf::error& e) {
                 BOOST_TEST((troupe_code(e) == errc::compute_failed));
                 BOOST_TEST(describe(e).find("evaluating epoch 3 failed: ") != std::string::npos, describe(e));
               });
  self->send_exit(ev, caf::exit_reason::user_shutdown);
}
