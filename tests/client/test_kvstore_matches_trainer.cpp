// The client library against the built-in trainer: a training loop written on
// troupe::kv::kvstore (one key per parameter block, the shards' optimizer set from the
// job's flags), run by three worker threads in sync mode, ends with parameters bitwise
// equal to `troupe train` (run_job_in_process) on the same model, data and seed. This is
// what lets a user move a model between the two and trust the shard servers' arithmetic:
// the same sums in rank order, the same optimizer, the same schedule.
#define BOOST_TEST_MODULE kvstore_matches_trainer
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <future>
#include <thread>

#include "client/kvstore.hpp"
#include "core/job.hpp"
#include "tests/support/jobs.hpp"
#include "train/sampler.hpp"
#include "train/stage_replica.hpp"

using namespace troupe;

namespace {

// The job both sides train: a two-layer MLP on synthetic data, the command's default
// optimizer (SGD, Nesterov momentum, weight decay) and schedule (warm-up, cosine).
job_spec the_job(std::uint32_t workers) {
  job_spec j;
  j.job_id = "kv-vs-trainer";
  j.train.model = "mlp:784-32-10";
  j.train.epochs = 2;
  j.train.batch_size = 16;
  j.train.seed = 7;
  j.workers = workers;
  j.servers = 2;
  j.mode = sync_mode::sync;
  return j;
}

// The shards' optimizer that the job's flags describe.
kv::optimizer_spec optimizer_of(const job_spec& job) {
  const lr_schedule s = job_schedule(job);
  const optimizer_config& c = job.train.optimizer;
  kv::optimizer_spec o;
  o.kind = std::string(name_of(c.kind));
  o.lr = s.base;
  o.momentum = c.momentum;
  o.nesterov = c.nesterov;
  o.weight_decay = c.weight_decay;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  o.schedule = std::string(name_of(s.kind));
  o.warmup_updates = s.warmup_steps;
  o.total_updates = s.total_steps;
  o.final_fraction = s.final_fraction;
  return o;
}

// One worker's loop, as a user writes it on the client library: initialise every block
// from the seed (the first init wins), then per minibatch pull the parameters, compute
// the gradient of the mean loss, and push it.
void train_on_kvstore(kv::kvstore& kv, const job_spec& job, const dataset_split& data) {
  auto net = build_model(job);
  BOOST_REQUIRE(net.has_value());
  const std::vector<param_block> blocks = net->blocks();
  stage_replica rep(std::move(*net), true, true, job.train.batch_size, 1);
  rep.net().init_params(rep.params().view(), job.train.seed);

  std::vector<kv::key> keys;
  std::vector<kv::array> params;
  std::vector<kv::const_array> grads;
  for (const auto& b : blocks) {
    keys.emplace_back(b.name);
    std::vector<std::int64_t> dims(b.shape.dims().begin(), b.shape.dims().end());
    params.push_back({rep.params().data<float>() + b.offset, dims});
    grads.emplace_back(rep.grads().data<float>() + b.offset, dims);
  }
  kv.init(keys, std::vector<kv::const_array>(params.begin(), params.end()));
  if (kv.rank() == 0) kv.set_optimizer(optimizer_of(job));
  kv.barrier();  // no push before the optimizer is set

  tensor xb(data.train.sample_shape().prepend(job.train.batch_size));
  tensor yb({job.train.batch_size}, dtype::i32);
  for (std::int32_t epoch = 0; epoch < job.train.epochs; ++epoch) {
    const auto order = epoch_indices(data.train.size(), job.train.seed, epoch, static_cast<int>(kv.rank()),
                                     static_cast<int>(kv.num_workers()));
    for (std::int64_t step = 0; step < steps_per_epoch(job); ++step) {
      kv.wait(kv.pull(keys, params));
      rep.commit_params();
      rep.zero_grads();
      const std::int64_t rows = batch_rows(job, step);
      const auto idx = std::span<const std::int64_t>(order).subspan(step * job.train.batch_size, rows);
      gather_batch(xb.view().slice(0, rows), yb.view().slice(0, rows), data.train, idx);
      const int slot = rep.forward(xb.view().slice(0, rows));
      rep.loss(slot, yb.view().slice(0, rows), 1.0f / static_cast<float>(rows));
      rep.backward(slot, const_tensor_view());
      rep.fetch_grads();
      kv.wait(kv.push(keys, grads));
    }
  }
  kv.wait(kv.pull(keys, params));
}

}  // namespace

BOOST_AUTO_TEST_CASE(sync_training_through_the_client_library_is_bitwise_troupe_train) {
  const auto data = test::synthetic(200, 50, 11);
  job_spec job = the_job(3);  // three, so that the order of the sum matters
  auto m = prepare_job(job, *data);
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  const job_result trained = test::run_ok(job, data);
  BOOST_REQUIRE_EQUAL(trained.params.numel(), m->num_params());

  kv::options o;
  o.mode = "sync";
  o.servers = 2;
  o.timeout = std::chrono::milliseconds(30000);
  auto group = kv::kvstore::open_local_group(o, job.workers);
  std::vector<std::future<void>> workers;
  for (auto& kv : group)
    workers.push_back(std::async(std::launch::async, [&kv, &job, &data] { train_on_kvstore(*kv, job, *data); }));
  for (auto& w : workers) w.get();

  // Every block, pulled back through the store, is the trainer's bit for bit.
  tensor pulled({m->num_params()});
  std::vector<kv::key> keys;
  std::vector<kv::array> outs;
  for (const auto& b : m->blocks()) {
    keys.emplace_back(b.name);
    outs.push_back(
        {pulled.data<float>() + b.offset, std::vector<std::int64_t>(b.shape.dims().begin(), b.shape.dims().end())});
  }
  group[0]->wait(group[0]->pull(keys, outs));
  tensor initial({m->num_params()});
  m->init_params(initial.view(), job.train.seed);
  BOOST_TEST(std::memcmp(initial.data<float>(), pulled.data<float>(), pulled.nbytes()) != 0);  // it trained
  BOOST_TEST(std::memcmp(trained.params.data<float>(), pulled.data<float>(), pulled.nbytes()) == 0);
}
