// End-to-end tests of `troupe train` (tools/cmd_train.cpp, job_cli.cpp): a short job
// prints the documented JSON line; bad cluster flags exit 2 naming the flag; allreduce
// needs no shard servers; a pipeline prints its bubble; simulated compute reports no
// accuracy; a failing job exits 1 with the reason; a paused process resumes instead of
// failing as stalled; --show-model lists the layers --cuts takes; BatchNorm, Dropout and
// --augment train reproducibly across workers; a text's shifted windows reach every
// pipeline stage; --adam-betas reaches the shard servers, and --init the servers and the
// replicas. Every run has a deadline.
#define BOOST_TEST_MODULE cmd_train
#include <boost/test/unit_test.hpp>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/troupe_run.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

// The fingerprint of the final parameters a training command's JSON line reports.
std::string hash(const process_result& r) { return nlohmann::json::parse(r.out)["params_fnv1a"].get<std::string>(); }

}  // namespace

BOOST_AUTO_TEST_CASE(train_prints_the_job_json_line) {
  auto r =
      run_troupe({"train", "--dataset", "synthetic", "--train-samples", "4000", "--epochs", "1", "--mode", "sync"});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"mode", "workers", "servers", "epochs", "test_accuracy", "train_seconds",
                          "samples_per_second", "mean_staleness"})
    BOOST_TEST(j.contains(key), "JSON has " << key);
  BOOST_TEST(j["mode"].get<std::string>() == "sync");
  BOOST_TEST(j["workers"].get<int>() == 2);
  BOOST_TEST(j["servers"].get<int>() == 2);
  BOOST_TEST(j["mean_staleness"].get<double>() == 0.0);
  BOOST_TEST(r.err.find("epoch 1/1") != std::string::npos);
  BOOST_TEST(r.err.find("staleness") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(train_rejects_bad_cluster_flags) {
  expect_usage_error({"train", "--mode", "bsp"}, {"--mode", "sync", "async", "ssp"});
  expect_usage_error({"train", "--workers", "0"}, {"--workers"});
  expect_usage_error({"train", "--slow-worker", "fast"}, {"--slow-worker", "RANK:FACTOR"});
  expect_usage_error({"train", "--slow-worker", "1:0.5"}, {"--slow-worker"});
  expect_usage_error({"train", "--workers", "2", "--slow-worker", "7:2", "--dataset", "synthetic"}, {"--slow-worker"});
  expect_usage_error({"train", "--schedule", "zigzag"}, {"--schedule", "gpipe", "1f1b"});
  expect_usage_error({"train", "--pipeline-stages", "2", "--cuts", "3,x"}, {"--cuts", "2,4"});
  expect_usage_error({"train", "--pipeline-stages", "3", "--cuts", "4,2"}, {"--cuts", "increase"});
  expect_usage_error({"train", "--pipeline-stages", "3", "--cuts", "2"}, {"--cuts", "--pipeline-stages"});
  expect_usage_error({"train", "--servers", "0", "--workers", "2"}, {"--servers 0", "--workers 1"});
  expect_usage_error({"train", "--microbatches", "500"}, {"--microbatches", "--batch-size"});
  expect_usage_error({"train", "--local-reduce", "--mode", "async"}, {"--local-reduce", "--mode sync"});
  expect_usage_error({"train", "--compression", "fp8"}, {"--compression", "2bit"});
  expect_usage_error({"train", "--compression", "2bit:-1"}, {"--compression", "threshold"});
  expect_usage_error({"train", "--servers", "0", "--workers", "1", "--compression", "fp16"},
                     {"--compression", "--servers 0"});
  expect_usage_error({"train", "--pull-precision", "fp8"}, {"--pull-precision"});
  expect_usage_error({"train", "--async-rule", "adagrad"}, {"--async-rule", "dcasgd"});
  expect_usage_error({"train", "--share-balance", "maybe"}, {"--share-balance"});
  expect_usage_error({"train", "--critical-batch", "-1"}, {"--critical-batch"});
  expect_usage_error({"train", "--dc-lambda", "nan"}, {"--dc-lambda"});
  expect_usage_error({"train", "--backup-workers", "1"}, {"--backup-workers", "--mode sync"});  // async by default
  expect_usage_error({"train", "--mode", "sync", "--backup-workers", "2"},
                     {"--backup-workers 2", "fewer than --workers"});
  expect_usage_error({"train", "--mode", "sync", "--backup-workers", "-1"}, {"--backup-workers"});
  expect_usage_error({"train", "--mode", "ssp", "--straggler-factor", "0.5"}, {"--straggler-factor", ">= 1"});
  expect_usage_error({"train", "--mode", "ssp", "--straggler-factor", "inf"}, {"--straggler-factor"});
  expect_usage_error({"train", "--bucket-bytes", "-5"}, {"--bucket-bytes"});
  expect_usage_error({"train", "--servers", "0", "--workers", "1", "--pull-precision", "2bit"},
                     {"--pull-precision 2bit", "--servers 0"});
  expect_usage_error({"train", "--mode", "allreduce", "--servers", "2"}, {"--mode allreduce", "--servers"});
  expect_usage_error({"train", "--mode", "allreduce", "--allreduce-op", "max"}, {"--allreduce-op", "sum", "avg"});
  expect_usage_error({"train", "--mode", "allreduce", "--compression", "fp16"}, {"--compression"});
  expect_usage_error({"train", "--mode", "sync", "--allreduce-op", "avg"},
                     {"--allreduce-op", "--mode allreduce", "sync"});
}

// Note [Ring all-reduce of gradients]: no shard servers unless asked for (which is refused).
BOOST_AUTO_TEST_CASE(train_in_allreduce_mode_needs_no_shard_servers) {
  auto r = run_troupe({"train", "--dataset", "synthetic", "--train-samples", "3000", "--epochs", "2", "--workers", "3",
                       "--mode", "allreduce", "--metrics", "off"});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["mode"].get<std::string>() == "allreduce");
  BOOST_TEST(j["servers"].get<int>() == 0);
  BOOST_TEST(j["workers"].get<int>() == 3);
  BOOST_TEST(j["test_accuracy"].get<double>() > 0.6);  // 3 classes of synthetic data
  BOOST_TEST(r.err.find("allreduce, 3 workers, model") != std::string::npos);
  BOOST_TEST(r.err.find("the replicas sum their gradients in a ring each step") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(train_runs_a_pipeline_and_prints_its_bubble) {
  auto r = run_troupe({"train", "--dataset", "synthetic", "--train-samples", "2000", "--epochs", "1",
                       "--pipeline-stages", "2", "--microbatches", "4", "--replicas", "1", "--servers", "0"});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["pipeline_stages"].get<int>() == 2);
  BOOST_TEST(j["microbatches"].get<int>() == 4);
  BOOST_TEST(j["bubble"].get<double>() > 0.0);
  BOOST_TEST(r.err.find("1 pipeline of 2 stages (1f1b, 4 microbatches, cuts at layers") != std::string::npos);
  BOOST_TEST(r.err.find("(theory 20.0% for K=2, M=4)") != std::string::npos);
  // Note [Cuts by measured time]: the default balance says where it cut and why.
  BOOST_TEST(r.err.find("pipeline: cut at layer") != std::string::npos);
  BOOST_TEST(r.err.find("balanced by measured time (each layer's forward and backward on 32 rows") !=
             std::string::npos);
  BOOST_TEST(r.err.find("repeats them") != std::string::npos);
}

// A layers: model (a residual block with LayerNorm and GELU) reaches every member as its
// text and trains in a 2-stage pipeline cut between its layers.
BOOST_AUTO_TEST_CASE(train_runs_a_layer_list_model_in_a_pipeline) {
  auto r = run_troupe({"train", "--dataset", "synthetic", "--train-samples", "4000", "--epochs", "3", "--model",
                       "layers:flatten; linear 64; residual(layernorm, linear 32, gelu, linear 64); gelu; linear 10",
                       "--pipeline-stages", "2", "--microbatches", "2", "--workers", "2", "--servers", "1"});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["pipeline_stages"].get<int>() == 2);
  BOOST_TEST(j["test_accuracy"].get<double>() > 0.6);  // 83.7% here; 10 classes, so chance is 10%
  BOOST_TEST(
      r.err.find("model layers:flatten; linear 64; residual(layernorm, linear 32, gelu, linear 64); gelu; linear 10") !=
      std::string::npos);
}

// BatchNorm, Dropout and --augment reach every worker: a sync job with them learns, says
// its augmentation, and ends with the same parameters when run again; without the
// augmentation it ends elsewhere.
BOOST_AUTO_TEST_CASE(train_with_batchnorm_dropout_and_augmentation_is_reproducible) {
  auto run = [](const std::string& augment) {
    // Fashion-MNIST: crops and flips of the synthetic set's noise would erase its classes.
    return run_troupe({"train", "--train-samples", "3000", "--epochs", "1", "--mode", "sync", "--lr", "0.02", "--model",
                       "layers:conv2d 4 pad=1; batchnorm; relu; maxpool2d; flatten; dropout 0.2; linear 10",
                       "--augment", augment});
  };
  auto a = run("flip,crop"), b = run("crop=2,flip"), plain = run("none");
  BOOST_TEST_INFO("stderr: " << a.err);
  BOOST_REQUIRE(a.exit_code == 0);
  BOOST_REQUIRE(b.exit_code == 0);
  BOOST_REQUIRE(plain.exit_code == 0);
  BOOST_TEST(a.err.find("augment crop=2,flip") != std::string::npos);
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out),
             jp = nlohmann::json::parse(plain.out);
  BOOST_TEST(ja["test_accuracy"].get<double>() > 0.4);  // 64% here; 10 classes: chance is 10%
  BOOST_TEST(ja["params_fnv1a"].get<std::string>() == jb["params_fnv1a"].get<std::string>());
  BOOST_TEST(ja["params_fnv1a"].get<std::string>() != jp["params_fnv1a"].get<std::string>());
}

// --augment shift moves a text's windows on every stage: cut in two, a job ends with the
// unsplit job's parameters (the last stage's labels follow the first stage's tokens), and
// without the shift it ends elsewhere.
BOOST_AUTO_TEST_CASE(shifted_text_windows_reach_every_pipeline_stage) {
  temp_dir dir("cli-shift");
  {
    std::ofstream text(dir.file("corpus.txt"));
    for (int i = 0; i < 40; ++i) text << "pack my box with " << i << " dozen liquor jugs; ";
  }
  auto run = [&](const std::string& stages, const std::string& augment) {
    return run_troupe({"train",
                       "--dataset",
                       "text:" + dir.file("corpus.txt"),
                       "--context",
                       "16",
                       "--model",
                       "gpt:layers=2,dim=16,heads=2",
                       "--epochs",
                       "2",
                       "--mode",
                       "sync",
                       "--workers",
                       "1",
                       "--servers",
                       "1",
                       "--batch-size",
                       "8",
                       "--optimizer",
                       "adamw",
                       "--lr",
                       "0.01",
                       "--sample",
                       "0",
                       "--pipeline-stages",
                       stages,
                       "--microbatches",
                       "2",
                       "--augment",
                       augment});
  };
  auto unsplit = run("1", "shift"), split = run("2", "shift"), plain = run("1", "none");
  BOOST_TEST_INFO("stderr: " << split.err);
  BOOST_REQUIRE(unsplit.exit_code == 0);
  BOOST_REQUIRE(split.exit_code == 0);
  BOOST_REQUIRE(plain.exit_code == 0);
  BOOST_TEST(split.err.find("augment shift") != std::string::npos);
  const auto ju = nlohmann::json::parse(unsplit.out), js = nlohmann::json::parse(split.out),
             jp = nlohmann::json::parse(plain.out);
  BOOST_TEST(js["pipeline_stages"].get<int>() == 2);
  BOOST_TEST(js["params_fnv1a"].get<std::string>() == ju["params_fnv1a"].get<std::string>());
  BOOST_TEST(jp["params_fnv1a"].get<std::string>() != ju["params_fnv1a"].get<std::string>());
}

// The shard servers run the optimizer, so the betas must travel with the job: other betas
// end elsewhere, and the default written out ends where leaving the flag out does.
BOOST_AUTO_TEST_CASE(adam_betas_reach_the_shard_servers) {
  const auto adam = with({"train", "--mode", "sync", "--optimizer", "adam", "--lr", "1e-3"}, quick);
  auto plain = run_troupe(adam);
  auto spelt = run_troupe(with(adam, {"--adam-betas", "0.9,0.999"}));
  auto other = run_troupe(with(adam, {"--adam-betas", "0.5,0.9"}));
  BOOST_TEST_INFO("stderr: " << plain.err << spelt.err << other.err);
  BOOST_REQUIRE((plain.exit_code == 0 && spelt.exit_code == 0 && other.exit_code == 0));
  BOOST_TEST(hash(plain) == hash(spelt));
  BOOST_TEST(hash(plain) != hash(other));
  BOOST_TEST(other.err.find("betas 0.5,0.9") != std::string::npos);
}

// --init travels with the job to whoever draws the parameters: the shard servers in sync
// mode, every replica in allreduce mode. The default written out ends where leaving the flag
// out does; pytorch ends elsewhere and says so on the first line.
BOOST_AUTO_TEST_CASE(init_reaches_the_shard_servers_and_the_replicas) {
  for (const std::string mode : {"sync", "allreduce"}) {
    const auto job = with({"train", "--mode", mode, "--workers", "2", "--metrics", "off"}, quick);
    auto plain = run_troupe(job);
    auto spelt = run_troupe(with(job, {"--init", "he"}));
    auto torch = run_troupe(with(job, {"--init", "pytorch"}));
    BOOST_TEST_CONTEXT(mode << ": " << plain.err << spelt.err << torch.err) {
      BOOST_REQUIRE((plain.exit_code == 0 && spelt.exit_code == 0 && torch.exit_code == 0));
      BOOST_TEST(hash(plain) == hash(spelt));
      BOOST_TEST(hash(plain) != hash(torch));
      BOOST_TEST(torch.err.find("init pytorch") != std::string::npos);
      BOOST_TEST(plain.err.find(", init ") == std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(simulated_train_reports_no_accuracy) {
  auto r = run_troupe({"train", "--dataset", "synthetic", "--train-samples", "2000", "--epochs", "1",
                       "--simulate-compute", "1", "--workers", "3", "--mode", "ssp"});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["test_accuracy"].is_null());
  BOOST_TEST(j["workers"].get<int>() == 3);
}

BOOST_AUTO_TEST_CASE(train_failure_exits_one_with_the_reason) {
  auto r =
      run_troupe({"train", "--dataset", "synthetic", "--train-samples", "2000", "--lr", "1e6", "--warmup-epochs", "0"});
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("diverged") != std::string::npos);
  BOOST_TEST(r.out.empty());
}

// Note [Paused processes]: a whole `troupe train` stopped (Ctrl-Z) for longer than its
// --stall-timeout goes on when it resumes, where it used to fail as stalled at once.
BOOST_AUTO_TEST_CASE(a_paused_train_process_resumes_instead_of_failing_as_stalled) {
  temp_dir dir("cli-paused");
  background_process p({troupe_bin(), "train", "--dataset", "synthetic", "--train-samples", "20000", "--epochs", "2",
                        "--simulate-compute", "20", "--batch-size", "64", "--stall-timeout", "2", "--metrics", "off"},
                       dir.file("train"));
  BOOST_REQUIRE(p.started());
  BOOST_REQUIRE_MESSAGE(p.wait_for_err("epoch 1/2", 60s), p.err());
  p.signal(SIGSTOP);
  std::this_thread::sleep_for(12s);  // past the watchdog's paused_gap (10 s) and the stall timeout
  p.signal(SIGCONT);
  const auto code = p.wait(60s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), "the job did not end after it resumed: " << p.err());
  BOOST_TEST(*code == 0, p.err());
  BOOST_TEST(p.err().find("stalled") == std::string::npos, p.err());
}

// `train --show-model` lists the layers whose indices --cuts takes, as train-local's does.
BOOST_AUTO_TEST_CASE(train_shows_the_model_it_cuts) {
  auto r = run_troupe(with({"train", "--show-model", "--metrics", "off"}, quick));
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.err.find("1: linear(784 -> 256)") != std::string::npos);
  BOOST_TEST(r.err.find("parameters: 235146") != std::string::npos);
}
