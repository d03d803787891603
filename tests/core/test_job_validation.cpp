// Tests for validate() in core/job.cpp: every refusal names the flag to change, by
// concern (the layout of members and servers, the training, a key-value job's transfers,
// checkpoints, and the rules for stragglers, shares and elasticity), and what it allows
// passes.
#define BOOST_TEST_MODULE job_validation
#include <boost/test/unit_test.hpp>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/job.hpp"
#include "tensor/grad_codec.hpp"

using namespace troupe;

namespace {

// validate()'s refusal of the default job changed by `change`; empty when it passes.
std::string problem(const std::function<void(job_spec&)>& change) {
  job_spec j;
  change(j);
  auto p = validate(j);
  return p ? *p : std::string();
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_layout_of_members_and_servers) {
  BOOST_TEST(problem([](job_spec& j) { j.workers = 0; }).find("--workers") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.servers = 0; }).find("--servers 0") != std::string::npos);  // 2 replicas
  BOOST_TEST(problem([](job_spec& j) { j.servers = 2000; }).find("--servers") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.pipeline_stages = 0; }).find("--pipeline-stages") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.microbatches = 0; }).find("--microbatches") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.microbatches = 200; }).find("--batch-size") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) {
               j.pipeline_stages = 3;
               j.cuts = {2};
             }).find("--cuts") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) {
               j.pipeline_stages = 2;
               j.slow_worker = 4;
             }).find("replica * stages + stage") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_training) {
  BOOST_TEST(problem([](job_spec& j) { j.staleness = -1; }).find("--staleness") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.bucket_bytes = -1; }).find("--bucket-bytes") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.local_reduce = true; }).find("--local-reduce") != std::string::npos);  // async
  BOOST_TEST(problem([](job_spec& j) {
               j.local_reduce = true;
               j.mode = sync_mode::sync;
               j.pipeline_stages = 2;
             }).find("one pipeline stage") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) {
               j.local_reduce = true;
               j.mode = sync_mode::sync;
             }).empty());
  BOOST_TEST(problem([](job_spec& j) { j.slow_worker = 5; }).find("--slow-worker") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.train.lr = 0; }).find("--lr") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) {
               j.train_size = 1;
               j.workers = 4;
             }).find("fewer than the 4 workers") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_key_value_job_and_what_crosses_the_network) {
  // A key-value job: shard servers and one stage; compression applies to its pushes too.
  BOOST_TEST(problem([](job_spec& j) {
               j.kv = true;
               j.pipeline_stages = 2;
             }).find("--pipeline-stages") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) {
               j.kv = true;
               j.compression = *parse_grad_codec("2bit");
               j.pull_precision = *parse_grad_codec("bf16");
             }).empty());
  // 2-bit pulls keep a view per member (and key part) on the shards, of every kind of job
  // with shards.
  BOOST_TEST(problem([](job_spec& j) {
               j.kv = true;
               j.pull_precision = *parse_grad_codec("2bit");
             }).empty());
  BOOST_TEST(problem([](job_spec& j) { j.pull_precision = *parse_grad_codec("2bit"); }).empty());
  BOOST_TEST(problem([](job_spec& j) {
               j.servers = 0;
               j.workers = 1;
               j.pull_precision = *parse_grad_codec("2bit");
             }).find("--pull-precision 2bit") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(checkpoints) {
  // Checkpoints keep the state of a training job with real compute, wherever it lies: on
  // the shard servers, or in the members (Note [Members' checkpoints]).
  BOOST_TEST(problem([](job_spec& j) { j.checkpoints.dir = "ck"; }).empty());
  BOOST_TEST(problem([](job_spec& j) {
               j.checkpoints.dir = "ck";
               j.servers = 0;
               j.workers = 1;
             }).empty());
  BOOST_TEST(problem([](job_spec& j) {
               j.checkpoints.dir = "ck";
               j.mode = sync_mode::allreduce;
               j.servers = 0;
               j.workers = 3;
             }).empty());
  BOOST_TEST(problem([](job_spec& j) {
               j.checkpoints.dir = "ck";
               j.kv = true;
             }).find("--checkpoint-dir") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) {
               j.checkpoints.dir = "ck";
               j.simulate_compute_ms = 5;
             }).find("--simulate-compute") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.checkpoints.every = -1; }).find("--checkpoint-every") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.checkpoints.keep = 0; }).find("--keep-checkpoints") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.checkpoints.queue = 0; }).find("--checkpoint-queue") != std::string::npos);
  BOOST_TEST(problem([](job_spec& j) { j.checkpoints.queue = 1; }).empty());
  BOOST_TEST(problem([](job_spec& j) {
               j.checkpoints.on_shard_loss = shard_loss::recover;
               j.mode = sync_mode::allreduce;
               j.servers = 0;
             }).find("--on-shard-loss recover") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_straggler_factor_is_0_or_a_finite_number_from_1) {
  job_spec j;
  j.mode = sync_mode::ssp;
  for (double ok : {0.0, 1.0, 2.0, 50.0}) {
    j.straggler_factor = ok;
    BOOST_TEST(!validate(j), ok);
  }
  for (double bad : {-1.0, 0.5, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    j.straggler_factor = bad;
    BOOST_TEST(validate(j).value_or("").find("--straggler-factor") != std::string::npos, bad);
  }
}

BOOST_AUTO_TEST_CASE(share_balance_on_needs_a_job_that_deals_samples) {
  job_spec j;
  j.workers = 4;
  j.balance_shares = share_balance::on;
  BOOST_TEST(!validate(j));
  for (auto change : std::vector<std::function<void(job_spec&)>>{
           // (--servers 0 and --local-reduce with several workers are refused before, by their own checks)
           [](job_spec& x) { x.pipeline_stages = 2; }, [](job_spec& x) { x.kv = true; },
           [](job_spec& x) { x.workers = 1; }}) {
    job_spec bad = j;
    change(bad);
    const std::string why = validate(bad).value_or("");
    BOOST_TEST(why.find("--share-balance on") != std::string::npos, why);
    BOOST_TEST(why.find("it needs 2 or more workers") != std::string::npos, why);
  }
  j.balance_shares = share_balance::automatic;  // auto simply does not balance there
  j.pipeline_stages = 2;
  BOOST_TEST(validate(j).value_or("").find("--share-balance") == std::string::npos);
}
