// How a shard turns many workers' gradients into updates that converge with the
// command's defaults: the sync learning rate's cap at the critical batch, and the async
// rules (--async-rule) that correct for staleness. The shard core applies them; the
// formulas live here so they can be tested against hand-computed values.
//
// Note [Critical batch]
// A sync round sums the N workers' gradients of batch B and applies the sum at the
// per-worker lr: the linear scaling rule (one worker of batch N*B at N*lr). It holds up to
// a critical batch that depends on the model and no further ("An Empirical Model of
// Large-Batch Training"; Goyal et al. needed a 5-epoch warm-up beyond 8k on ImageNet).
// Measured here with the defaults (batch 128, lr 0.05, momentum 0.9): the MLP diverged in
// its first epoch at 8 workers (an lr of 0.4 on the mean); the CNN at 4 workers (0.2 on
// the mean) ended at 39.6%, or at chance with a 2-epoch warm-up, and trained at 0.1 on the
// mean with the warm-up doubled (docs/benchmarks.md, "Distributed accuracy at the defaults"). So
// once N*B passes --critical-batch C (256), the lr is scaled by max(C, B) / (N*B): the
// mean's lr stays where it was at C (never below what one worker uses), and the warm-up
// is lengthened by N*B / max(C, B), so it covers as many samples as it would at C. C = 0
// keeps linear scaling without a cap (MXNet's dist_sync).
//
// Note [Momentum of asynchrony]
// N workers that push on arrival make the shard's updates behave as if they had an extra
// momentum of about 1 - 1/N ("Asynchrony begets momentum", Mitliagkas et al. 2016): each
// update is computed on parameters about N - 1 updates old. On top of SGD's momentum mu
// that overshoots: with mu = 0.9, 4 workers diverged in the first epoch. The `momentum`
// rule treats the two as composing like (1 - mu_total) = (1 - mu_explicit) / N and picks
// the explicit momentum that keeps mu_total at mu: mu_explicit = 1 - N (1 - mu). Where
// that is below 0 (N > 1 / (1 - mu): 11 workers at mu = 0.9), it uses 0 and scales the lr
// by 1 / (N (1 - mu)), which keeps the effective step lr / (1 - mu_total) at lr / (1 - mu).
// N counts the live members that push to the slice (workers, or one stage's replicas),
// not the measured staleness, so the update is a function of the membership alone.
// Adam is left alone (it normalises its steps by the gradients' own scale).
//
// Note [Warm-up of asynchrony]
// Early in training the gradients change fastest, and an asynchronous update is computed
// on parameters about N - 1 updates old. Past async_warmup_workers (8) workers the
// warm-up is lengthened by N / 8, as the sync rule lengthens it past the critical batch
// (Note [Critical batch]). Measured with the MLP, full Fashion-MNIST, 5 epochs, 16 async
// workers of 8 samples, 6 seeds: 88.55% on average with the 0.5-epoch warm-up, 88.74%
// with 1 epoch (ssp: 88.57%, 88.62%). It comes with every rule but `none`.
//
// Note [Delay compensation]
// DC-ASGD (Zheng et al. 2017, MXNet's DCASGD optimizer) adds to a gradient g computed on
// the parameters w_bak a worker last pulled the first-order correction for the parameters
// having moved to w since: g + lambda * g * g * (w - w_bak), the diagonal of g g^T as a
// cheap Hessian estimate. The shard keeps each member's w_bak (one copy of its slice per
// member) and takes it when a pull is answered. `dcasgd` applies the `momentum` rule too:
// the compensation corrects the gradient, not the overshoot of the momenta.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/expected.hpp"
#include "tensor/optimizer.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// dana: Note [Momentum per member] in core/member_momenta.hpp, the default.
enum class async_rule : std::uint8_t { none = 0, momentum = 1, dcasgd = 2, dana = 3 };
expected<async_rule> parse_async_rule(std::string_view name);
std::string_view name_of(async_rule r);

// Note [Critical batch]: the sync schedule of `workers` workers of `batch` samples.
lr_schedule cap_at_critical_batch(lr_schedule s, std::uint32_t workers, std::int64_t batch,
                                  std::int64_t critical_batch);

// Note [Momentum of asynchrony]: SGD's momentum and the lr's factor for `pushers` members
// pushing on arrival.
struct momentum_correction {
  float momentum = 0.f;
  float lr_scale = 1.f;
};
momentum_correction correct_for_asynchrony(float momentum, std::uint32_t pushers);

// Note [Warm-up of asynchrony]: the schedule for `pushers` members pushing on arrival.
// Past it the job's batch shrinks too (Note [The job's batch] in core/job.hpp).
constexpr std::uint32_t async_warmup_workers = 8;
lr_schedule warm_up_for_asynchrony(lr_schedule s, std::uint32_t pushers);

// Note [Delay compensation]: out = g + lambda * g * g * (now - pulled), elementwise; all
// of one length (out may be g).
void compensate_delay(tensor_view out, const_tensor_view g, const_tensor_view now, const_tensor_view pulled,
                      float lambda);

}  // namespace troupe
