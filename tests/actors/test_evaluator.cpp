// Tests for actors/evaluator.cpp: the actor's score equals evaluate() on the same
// parameters, and a parameter vector of the wrong size is a typed error.
#define BOOST_TEST_MODULE evaluator
#include <boost/test/unit_test.hpp>

#include "actors/evaluator.hpp"
#include "tensor/evaluate.hpp"
#include "tests/support/caf_fixture.hpp"

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
