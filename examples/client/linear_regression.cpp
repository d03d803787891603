// A training loop of its own that learns y = X w* through Troupe's shard servers with
// troupe::kv::kvstore: each worker computes its gradient, pushes it, and pulls the
// parameters the shards updated. Alone it keeps the shards in its process:
//   build/bin/example_kv_linear
// As the workers of a launched job (over mutual TLS):
//   troupe launch --local --workers 2 --servers 2 --mode sync -- build/bin/example_kv_linear dist_sync
// Exits 0 when the parameters come within 1e-2 of w*, 1 otherwise, 2 on a Troupe error.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "client/kvstore.hpp"

int main(int argc, char** argv) {
  constexpr int dim = 16, rows = 64, steps = 300;
  try {
    troupe::kv::options opts;
    opts.type = argc > 1 ? argv[1] : "local";
    auto kv = troupe::kv::kvstore::open(opts);
    std::mt19937 rng(7 + kv->rank());
    std::normal_distribution<float> normal;
    std::vector<float> w_star(dim), w(dim, 0.f), grad(dim), x(rows * dim), y(rows);
    for (int j = 0; j < dim; ++j) w_star[j] = static_cast<float>(j % 5) - 2.f;
    kv->init("w", {w.data(), {dim}});
    troupe::kv::optimizer_spec sgd;
    sgd.lr = 0.05f / static_cast<float>(kv->num_workers());
    sgd.momentum = 0.5f;
    kv->set_optimizer(sgd);
    for (int step = 0; step < steps; ++step) {
      for (int i = 0; i < rows; ++i) {
        y[i] = 0.f;
        for (int j = 0; j < dim; ++j) y[i] += (x[i * dim + j] = normal(rng)) * w_star[j];
      }
      std::fill(grad.begin(), grad.end(), 0.f);  // of the mean squared error / 2
      for (int i = 0; i < rows; ++i) {
        float err = -y[i];
        for (int j = 0; j < dim; ++j) err += x[i * dim + j] * w[j];
        for (int j = 0; j < dim; ++j) grad[j] += err * x[i * dim + j] / rows;
      }
      kv->push({"w"}, {{grad.data(), {dim}}});
      kv->wait(kv->pull({"w"}, {{w.data(), {dim}}}));
    }
    kv->barrier();
    kv->wait(kv->pull({"w"}, {{w.data(), {dim}}}));
    float worst = 0.f;
    for (int j = 0; j < dim; ++j) worst = std::max(worst, std::fabs(w[j] - w_star[j]));
    std::printf("worker %u of %u (%s, %s): largest error %.2e after %d steps\n", kv->rank(), kv->num_workers(),
                kv->type().c_str(), kv->mode().c_str(), worst, steps);
    kv->close();
    return worst < 1e-2f ? 0 : 1;
  } catch (const troupe::kv::error& e) {
    std::fprintf(stderr, "example_kv_linear: %s\n", e.what());
    return 2;
  }
}
