// End-to-end tests of `troupe train-local` (tools/cmd_train_local.cpp): a short run prints
// the documented JSON line, and a run at chance warns and says so in it; a missing dataset
// exits 1 saying where it looked and how to get it; a model file of layers trains and a
// bad line is named; a gpt trains on a text and reports bits per character, and a text it
// cannot use is named; CUDA where it cannot be used fails with the reason; --precision
// bf16 trains on the CPU and its misuses (here and in the other commands) are named.
// Every run has a deadline.
#define BOOST_TEST_MODULE cmd_train_local
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/troupe_run.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(missing_dataset_says_where_and_how) {
  auto r = run_troupe({"train-local", "--data", "/nonexistent/fmnist"});
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("/nonexistent/fmnist") != std::string::npos);
  BOOST_TEST(r.err.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  BOOST_TEST(r.out.empty());
}

BOOST_AUTO_TEST_CASE(short_run_prints_the_json_line) {
  auto r = run_troupe(with({"train-local"}, quick));
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"test_accuracy", "train_seconds", "samples_per_second", "epochs", "model"})
    BOOST_TEST(j.contains(key), "JSON has " << key);
  BOOST_TEST(j["epochs"].get<int>() == 1);
  BOOST_TEST(j["model"].get<std::string>() == "mlp:784-256-128-10");
  BOOST_TEST(j["test_accuracy"].get<double>() > 0.5);
  BOOST_TEST(j["accuracy_at_chance_epoch"].is_null());
  BOOST_TEST(r.err.find("epoch 1/1") != std::string::npos);  // plain progress line off a terminal
  BOOST_TEST(r.err.find("warning") == std::string::npos);
}

// Note [Accuracy at chance]: a run that ends at chance with a finite loss (here, an lr
// too small to move it) still succeeds, but warns with what to change and names the epoch.
BOOST_AUTO_TEST_CASE(a_run_at_chance_is_reported) {
  auto r =
      run_troupe({"train-local", "--dataset", "synthetic", "--train-samples", "1000", "--epochs", "1", "--lr", "1e-9"});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["accuracy_at_chance_epoch"].get<int>() == 1);
  BOOST_TEST(r.err.find("warning: epoch 1: test accuracy") != std::string::npos);
  BOOST_TEST(r.err.find("is chance for 10 classes while the training loss stayed finite") != std::string::npos);
  BOOST_TEST(r.err.find("the run has not learned") != std::string::npos);
  BOOST_TEST(r.err.find("lower --lr or lengthen --warmup-epochs") != std::string::npos);
}

// Note [Layer lists]: a model file becomes its layers: text, which trains and names the
// model; a bad line is a usage error naming the file's line.
BOOST_AUTO_TEST_CASE(a_model_file_of_layers_trains_and_a_bad_line_is_named) {
  temp_dir files("cli-model-file");
  const std::string net = files.write(
      "net.layers", "# LayerNorm and GELU between two linear layers\nflatten\nlinear 64\nlayernorm\ngelu\nlinear 10\n");
  auto r = run_troupe(with({"train-local", "--model", "file:" + net}, quick));
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["model"].get<std::string>() == "layers:flatten; linear 64; layernorm; gelu; linear 10");
  BOOST_TEST(j["test_accuracy"].get<double>() > 0.5);
  const std::string bad = files.write("bad.layers", "flatten\nlinear 64\ngelu 2\n");
  expect_usage_error({"train-local", "--model", "file:" + bad},
                     {"--model", "line 3 ('gelu 2')", "gelu takes no arguments"});
  expect_usage_error({"train-local", "--model", "layers:flatten; dense 10"}, {"layer 1 ('dense 10')", "unknown layer"});
}

// A character-level gpt on a text: bits per character in the JSON line and a sample of
// text at the end; a text that is not UTF-8, or too short for the context, fails with the
// reason and exit code 1.
BOOST_AUTO_TEST_CASE(a_gpt_trains_on_a_text_and_bad_texts_are_named) {
  temp_dir files("cli-gpt");
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const std::string corpus = files.write("corpus.txt", text);
  const std::vector<std::string> gpt = {"train-local",
                                        "--model",
                                        "gpt:layers=1,dim=16,heads=2",
                                        "--dataset",
                                        "text:" + corpus,
                                        "--context",
                                        "16",
                                        "--epochs",
                                        "3",
                                        "--batch-size",
                                        "16",
                                        "--optimizer",
                                        "adamw",
                                        "--lr",
                                        "0.01",
                                        "--sample",
                                        "40"};
  auto r = run_troupe(gpt);
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["model"].get<std::string>() == "gpt:layers=1,dim=16,heads=2");
  const double bits = j["validation_bits_per_char"].get<double>();
  BOOST_TEST((bits > 0.0 && bits < std::log2(28.0)));        // below a uniform guess over the 28 characters
  BOOST_TEST(j["sample"].get<std::string>().size() == 41u);  // the first character, then 40 more (ASCII)
  BOOST_TEST(r.err.find("bits per character") != std::string::npos);

  const std::string latin1 = files.write("latin1.txt", std::string(200, 'a') + "caf\xe9");
  auto bad = run_troupe(
      {"train-local", "--model", "gpt:layers=1,dim=16,heads=2", "--dataset", "text:" + latin1, "--context", "8"});
  BOOST_TEST(bad.exit_code == 1);
  BOOST_TEST(bad.err.find("not valid UTF-8 at byte 203") != std::string::npos, bad.err);
  auto too_short = run_troupe(
      {"train-local", "--model", "gpt:layers=1,dim=16,heads=2", "--dataset", "text:" + corpus, "--context", "1000"});
  BOOST_TEST(too_short.exit_code == 1);
  BOOST_TEST(too_short.err.find("too few for a context of 1000") != std::string::npos, too_short.err);
  BOOST_TEST(too_short.out.empty());
}

// Asking for CUDA where it cannot be used fails before anything starts, with the reason.
// A build without the module (simulated by pointing at a missing one) says so; here, the
// built module finds no driver. On a GPU machine the short run trains instead.
BOOST_AUTO_TEST_CASE(cuda_without_a_usable_gpu_fails_with_the_reason) {
  auto no_module = run_process(with({troupe_bin(), "train-local", "--device", "cuda"}, quick), 60s,
                               {"TROUPE_CUDA_MODULE=/nonexistent/libtroupe_cuda.so"});
  BOOST_TEST(no_module.exit_code == 1);
  BOOST_TEST(no_module.err.find("this build has no CUDA backend") != std::string::npos, no_module.err);
  BOOST_TEST(no_module.out.empty());

  temp_dir dir("cli-cuda");
  BOOST_REQUIRE(run_troupe({"tls", "secret", dir.file("job.secret")}).exit_code == 0);
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"train-local", "--device", "cuda"},
           {"train", "--device", "cuda:0", "--mode", "sync"},
           {"node", "--role", "worker", "--join", "127.0.0.1:9", "--device", "cuda", "--metrics", "off",
            "--insecure-network", "--secret-file", dir.file("job.secret")}}) {
    auto r = run_troupe(with(cmd, cmd[0] == "node" ? std::vector<std::string>{} : quick));
    BOOST_TEST_CONTEXT(cmd[0] << ": " << r.err) {
      if (r.exit_code == 0) continue;  // a usable GPU: it trained
      BOOST_TEST(r.exit_code == 1);
      BOOST_TEST(r.err.find("--device cuda") != std::string::npos);
      BOOST_TEST(r.err.find("Use --device cpu") != std::string::npos);
      BOOST_TEST(r.out.empty());
    }
  }
}

// --precision bf16: a short CPU run trains and says which engine multiplies; a value it
// does not know, a GPU, or a program after launch's -- is a usage error saying what to do.
BOOST_AUTO_TEST_CASE(precision_bf16_trains_on_the_cpu_and_its_misuses_are_named) {
  for (const auto& cmd : std::vector<std::vector<std::string>>{{"train-local", "--precision", "bf16"},
                                                               {"train", "--mode", "sync", "--precision", "bf16"}}) {
    auto r = run_troupe(with(cmd, quick));
    BOOST_TEST_CONTEXT(cmd[0] << ": " << r.err) {
      BOOST_REQUIRE(r.exit_code == 0);
      BOOST_TEST(r.err.find("products in bf16 (") != std::string::npos);
      const auto j = nlohmann::json::parse(r.out);
      BOOST_TEST(j["test_accuracy"].get<double>() > 0.5);
      BOOST_TEST(j["precision"].get<std::string>() == "bf16");  // the result says how it was computed
    }
  }
  expect_usage_error({"train-local", "--precision", "fp16"}, {"--precision", "fp32", "bf16"});

  temp_dir dir("cli-precision");
  BOOST_REQUIRE(run_troupe({"tls", "secret", dir.file("job.secret")}).exit_code == 0);
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"train-local", "--device", "cuda", "--precision", "bf16"},
           {"train", "--device", "cuda:0", "--precision", "bf16"},
           {"launch", "--local", "--device", "cuda", "--precision", "bf16"},
           {"node", "--role", "worker", "--join", "127.0.0.1:9", "--device", "cuda", "--precision", "bf16", "--metrics",
            "off", "--insecure-network", "--secret-file", dir.file("job.secret")}}) {
    auto r = run_troupe(cmd);
    BOOST_TEST_CONTEXT(cmd[0] << ": " << r.err) {
      BOOST_TEST(r.exit_code == 2);
      BOOST_TEST(r.err.find("--precision bf16 computes on the CPU only") != std::string::npos);
      BOOST_TEST(r.err.find("--tf32") != std::string::npos);
    }
  }
  // A worker takes it as its own; a shard server says it ignores it.
  for (const std::string role : {"worker", "server"}) {
    auto r = run_troupe({"node", "--role", role, "--join", "127.0.0.1:9", "--precision", "bf16", "--metrics", "off",
                         "--insecure-network", "--secret-file", dir.file("job.secret"), "--connect-timeout", "1"});
    BOOST_TEST_CONTEXT(role << ": " << r.err) {
      BOOST_TEST(r.exit_code != 0);  // nothing listens there
      BOOST_TEST((r.err.find("--precision is ignored on a server: it sets how a worker computes") !=
                  std::string::npos) == (role == "server"));
    }
  }
  auto user = run_troupe({"launch", "--local", "--precision", "bf16", "--", "/bin/true"});
  BOOST_TEST_INFO("stderr: " << user.err);
  BOOST_TEST(user.exit_code == 2);
  BOOST_TEST(user.err.find("Drop --precision") != std::string::npos);
  auto init = run_troupe({"launch", "--local", "--init", "pytorch", "--", "/bin/true"});
  BOOST_TEST_INFO("stderr: " << init.err);
  BOOST_TEST(init.exit_code == 2);
  BOOST_TEST(init.err.find("Drop --init") != std::string::npos);
}
