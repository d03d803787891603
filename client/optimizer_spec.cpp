// to_kv_optimizer: every setting checked, with a message naming it.
#include "client/optimizer_spec.hpp"

#include <cmath>

namespace troupe::kv {

namespace {
fault bad(const std::string& what) { return fault{errc::bad_job, "set_optimizer: " + what}; }
}  // namespace

or_fault<kv_optimizer> to_kv_optimizer(const optimizer_spec& spec) {
  kv_optimizer out;
  auto kind = parse_optimizer_kind(spec.kind);
  if (!kind) return bad("kind " + spec.kind + " is not sgd, adam or adamw");
  out.config.kind = *kind;
  auto schedule = parse_lr_schedule_kind(spec.schedule);
  if (!schedule) return bad("schedule " + spec.schedule + " is not constant, cosine or linear");
  if (!(std::isfinite(spec.lr) && spec.lr > 0)) return bad("lr must be a positive number, not " + std::to_string(spec.lr));
  if (!(spec.momentum >= 0 && spec.momentum < 1)) return bad("momentum must be in [0, 1)");
  if (!(spec.weight_decay >= 0 && std::isfinite(spec.weight_decay))) return bad("weight_decay must be >= 0");
  if (!(spec.beta1 >= 0 && spec.beta1 < 1 && spec.beta2 >= 0 && spec.beta2 < 1))
    return bad("beta1 and beta2 must be in [0, 1)");
  if (!(spec.eps > 0 && std::isfinite(spec.eps))) return bad("eps must be a positive number");
  if (spec.warmup_updates < 0 || spec.total_updates < 1) return bad("warmup_updates must be >= 0 and total_updates >= 1");
  if (!(spec.final_fraction >= 0 && spec.final_fraction <= 1)) return bad("final_fraction must be in [0, 1]");
  out.config.momentum = spec.momentum;
  out.config.nesterov = spec.nesterov;
  out.config.weight_decay = spec.weight_decay;
  out.config.beta1 = spec.beta1;
  out.config.beta2 = spec.beta2;
  out.config.eps = spec.eps;
  out.schedule = lr_schedule{*schedule, spec.lr, spec.warmup_updates, spec.total_updates, spec.final_fraction};
  return out;
}

}  // namespace troupe::kv
