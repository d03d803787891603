// Test helpers for pipelines of stage_replicas in one thread: a random minibatch, the unsplit model's loss and gradients, and run_pipeline, which runs
// one minibatch through the stages of a cut model, each stage following its own order of
// forwards and backwards, with copies for the messages between stages (as on the wire).
#pragma once

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "tensor/random.hpp"
#include "tests/support/models.hpp"
#include "tests/support/numeric.hpp"
#include "train/stage_replica.hpp"
#include "train/trainer.hpp"

namespace troupe::test {

struct minibatch {
  tensor x, y;
};

// b random sequences of `context` token ids below `vocab`, labelled with random next tokens.
inline minibatch random_text_batch(std::int64_t b, std::int64_t context, std::int64_t vocab, std::uint64_t seed) {
  minibatch mb{tensor({b, context}), tensor({b, context}, dtype::i32)};
  rng r(seed);
  for (std::int64_t i = 0; i < b * context; ++i) {
    mb.x.data<float>()[i] = static_cast<float>(r.below(static_cast<std::uint64_t>(vocab)));
    mb.y.data<std::int32_t>()[i] = static_cast<std::int32_t>(r.below(static_cast<std::uint64_t>(vocab)));
  }
  return mb;
}

inline minibatch random_batch(std::int64_t b, std::uint64_t seed) {
  minibatch mb{random_tensor({b, 1, 28, 28}, seed), tensor({b}, dtype::i32)};
  rng r(seed + 1);
  for (std::int64_t i = 0; i < b; ++i) mb.y.data<std::int32_t>()[i] = static_cast<std::int32_t>(r.uniform(0.f, 9.99f));
  return mb;
}

// One action of a stage: the forward or the backward of a microbatch.
struct stage_step {
  bool forward = true;
  int microbatch = 0;
};

// Every forward, then every backward: the order that needs no schedule.
inline std::vector<stage_step> forwards_then_backwards(int microbatches) {
  std::vector<stage_step> out;
  for (int j = 0; j < microbatches; ++j) out.push_back({true, j});
  for (int j = 0; j < microbatches; ++j) out.push_back({false, j});
  return out;
}

struct pipeline_outcome {
  tensor grads;  // the stages' gradients, concatenated: the full model's layout
  double loss = 0.0;
  std::vector<int> peak;  // per stage
};

// One stage_replica per stage, with `slots[i]` slots of `rows` rows, its parameters
// copied from its span of `params`, its gradients zero.
inline std::vector<std::unique_ptr<stage_replica>> stage_replicas(const std::vector<model>& stages, std::int64_t rows,
                                                                  const std::vector<int>& slots, const tensor& params,
                                                                  const compute& c) {
  const int k = static_cast<int>(stages.size());
  std::vector<std::unique_ptr<stage_replica>> reps;
  std::int64_t offset = 0;
  for (int i = 0; i < k; ++i) {
    reps.push_back(std::make_unique<stage_replica>(stages[i], i == 0, i == k - 1, rows, slots[i], c));
    auto& p = reps.back()->params();
    copy(p, params.view().flat(offset, p.numel()));
    reps.back()->commit_params();
    offset += p.numel();
    reps.back()->zero_grads();
  }
  return reps;
}

// Runs mb through m cut at `cuts` in `micro` microbatches; stage i follows orders[i] and
// has slots[i] slots. Stages take turns; one whose next action lacks its input waits.
inline pipeline_outcome run_pipeline(const model& m, const std::vector<int>& cuts, int micro,
                                     const std::vector<std::vector<stage_step>>& orders, const std::vector<int>& slots,
                                     const tensor& params, const minibatch& mb, const compute& c = host_compute()) {
  auto stages = m.cut(cuts);
  BOOST_REQUIRE(stages.has_value());
  const int k = static_cast<int>(stages->size());
  BOOST_REQUIRE(orders.size() == stages->size());
  const std::int64_t b = mb.x.size(0);
  auto rows_of = [&](int i) { return b * (i + 1) / micro - b * i / micro; };
  auto first_row = [&](int i) { return b * i / micro; };
  auto reps = stage_replicas(*stages, (b + micro - 1) / micro, slots, params, c);
  std::map<std::pair<int, int>, tensor> acts, grads;  // (stage, microbatch) -> message into that stage
  std::vector<std::map<int, int>> slot_of(k);
  std::vector<std::size_t> pos(k, 0);
  pipeline_outcome out;
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < k; ++i) {
      if (pos[i] == orders[i].size()) continue;
      const stage_step a = orders[i][pos[i]];
      const int j = a.microbatch;
      if (a.forward) {
        tensor in;
        if (i == 0) {
          in = tensor::uninitialized(mb.x.sizes().drop_front().prepend(rows_of(j)));
          copy(in, mb.x.view().slice(first_row(j), first_row(j) + rows_of(j)));
        } else {
          auto it = acts.find({i, j});
          if (it == acts.end()) continue;
          in = std::move(it->second);
          acts.erase(it);
        }
        const int slot = reps[i]->forward(in);
        slot_of[i][j] = slot;
        if (i == k - 1)
          out.loss += reps[i]->loss(slot, mb.y.view().slice(first_row(j), first_row(j) + rows_of(j)),
                                    1.0f / static_cast<float>(b)) *
                      static_cast<double>(rows_of(j)) / static_cast<double>(b);
        else
          acts[{i + 1, j}] = reps[i]->output_on_host(slot);
      } else {
        tensor g;
        if (i < k - 1) {
          auto it = grads.find({i, j});
          if (it == grads.end()) continue;
          g = std::move(it->second);
          grads.erase(it);
        }
        const_tensor_view gin = reps[i]->backward(slot_of[i][j], g.empty() ? const_tensor_view() : g.view());
        if (i > 0) {
          BOOST_REQUIRE(!gin.empty());
          tensor msg = tensor::uninitialized(gin.sizes());
          copy(msg, gin);
          grads[{i - 1, j}] = std::move(msg);
        } else {
          BOOST_TEST(gin.empty());
        }
      }
      ++pos[i];
      progress = true;
    }
  }
  for (int i = 0; i < k; ++i) BOOST_REQUIRE_EQUAL(pos[i], orders[i].size());
  out.grads = tensor({m.num_params()});
  std::int64_t offset = 0;
  for (int i = 0; i < k; ++i) {
    copy(out.grads.view().flat(offset, reps[i]->grads().numel()), reps[i]->fetch_grads());
    offset += reps[i]->grads().numel();
    out.peak.push_back(reps[i]->peak_stored());
    BOOST_TEST(reps[i]->stored() == 0);
  }
  return out;
}

// The unsplit model's parameters (seed 7), loss and gradients on mb.
struct reference {
  tensor params, grads;
  double loss = 0.0;
};

inline reference unsplit(const model& m, const minibatch& mb) {
  replica r(m, mb.x.size(0));
  m.init_params(r.params(), 7);
  reference out;
  out.loss = r.compute_gradients(mb.x, mb.y);
  out.params = r.params();  // a deep copy
  out.grads = r.grads();
  return out;
}

// max |a - b| / (max |b| over the whole tensor).
inline double max_relative_difference(const_tensor_view a, const_tensor_view b) {
  double diff = 0.0, scale = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::fabs(double(b.data<float>()[i])));
  }
  return diff / scale;
}

}  // namespace troupe::test
