// evaluator: one handler around tensor/evaluate.
#include "actors/evaluator.hpp"

#include "base/compute_fault.hpp"
#include "train/evaluate.hpp"

namespace troupe {

namespace {

evaluator_actor::behavior_type evaluator(evaluator_actor::pointer, model m, std::shared_ptr<const dataset_split> data) {
  return {
      [m, data](eval_atom, const eval_request& r) -> caf::result<eval_reply> {
        if (held_numel(r.params) != m.num_params() || r.params.type() != dtype::f32)
          return make_error(errc::bad_shape, "evaluation got " + std::to_string(held_numel(r.params)) +
                                                 " parameters for a model of " + std::to_string(m.num_params()));
        eval_result ev;
        if (auto f = catch_compute("evaluating epoch " + std::to_string(r.epoch + 1),
                                   [&] { ev = evaluate(m, r.params, data->test, 1000, host_compute(), &data->train); }))
          return make_error(*f);
        return eval_reply{r.epoch, ev.accuracy, ev.loss};
      },
  };
}

}  // namespace

evaluator_actor spawn_evaluator(caf::actor_system& sys, model m, std::shared_ptr<const dataset_split> data) {
  return sys.spawn<caf::detached>(evaluator, std::move(m), std::move(data));
}

}  // namespace troupe
