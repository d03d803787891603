// The evaluator actor: scores a full parameter vector on the test set. It runs detached,
// so a long evaluation (the CNN takes seconds) blocks neither the coordinator nor CAF's
// scheduler threads.
#pragma once

#include <memory>

#include "actors/protocol.hpp"
#include "train/dataset.hpp"
#include "train/model.hpp"

namespace troupe {

evaluator_actor spawn_evaluator(caf::actor_system& sys, model m, std::shared_ptr<const dataset_split> data);

}  // namespace troupe
