// End-to-end tests of the troupe binary (tools/main.cpp, cmd_train_local.cpp,
// cli_common.cpp): bad flags and values exit 2 naming the flag and the allowed values, a
// missing dataset exits 1 saying where it looked and how to get it, config files are
// strict, a short run prints the documented JSON line, a run at chance warns and says so
// in it, `tls init` and `tls secret` write private files and replace nothing, and a shard
// server's lane port and a trace path are checked before work starts (`troupe train`'s
// own cases: test_cli_train.cpp). Every run has a deadline.
#define BOOST_TEST_MODULE cli
#include <boost/test/unit_test.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/background.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/troupe_run.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

struct temp_file {
  std::filesystem::path path;
  explicit temp_file(const std::string& content) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("troupe-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".toml");
    std::ofstream(path) << content;
  }
  ~temp_file() { std::filesystem::remove(path); }
};

const std::vector<std::string> quick = {"--dataset", "synthetic", "--train-samples", "5000", "--epochs", "1"};

}  // namespace

BOOST_AUTO_TEST_CASE(help_lists_commands_and_exits_zero) {
  auto r = run_troupe({"--help"});
  BOOST_TEST(r.exit_code == 0);
  BOOST_TEST(r.out.find("train-local") != std::string::npos);
  auto sub = run_troupe({"train-local", "--help"});
  BOOST_TEST(sub.exit_code == 0);
  BOOST_TEST(sub.out.find("--batch-size") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(missing_subcommand_is_a_usage_error) { expect_usage_error({}, {"subcommand"}); }

BOOST_AUTO_TEST_CASE(unknown_flag_is_named) { expect_usage_error({"train-local", "--bogus"}, {"--bogus"}); }

BOOST_AUTO_TEST_CASE(bad_values_name_the_flag_and_the_allowed_values) {
  expect_usage_error({"train-local", "--epochs", "0"}, {"--epochs", "1 to 10000"});
  expect_usage_error({"train-local", "--epochs", "abc"}, {"--epochs"});
  expect_usage_error({"train-local", "--optimizer", "rmsprop"}, {"--optimizer", "sgd", "adam", "adamw"});
  expect_usage_error({"train-local", "--adam-betas", "0.9"}, {"--adam-betas", "'0.9'", "B1,B2", "0.9,0.999"});
  expect_usage_error({"train-local", "--init", "xavier"}, {"--init", "'xavier'", "he or pytorch"});
  expect_usage_error({"train-local", "--model", "vgg"}, {"--model", "mlp:IN-H1-...-OUT"});
  expect_usage_error({"train-local", "--lr", "-1"}, {"--lr"});
  expect_usage_error({"train-local", "--batch-size", "0"}, {"--batch-size", "auto", "1 to 1048576"});
  expect_usage_error({"train", "--batch-size", "big"}, {"--batch-size", "auto", "1 to 1048576"});
  expect_usage_error({"train", "--batch-size", "2000000"}, {"--batch-size", "auto"});
  expect_usage_error({"train-local", "--dataset", "cifar"}, {"--dataset", "fashion-mnist", "synthetic", "text:FILE"});
  expect_usage_error({"train-local", "--context", "0"}, {"--context"});
  expect_usage_error({"train-local", "--augment", "rotate"}, {"--augment", "unknown item 'rotate'", "crop=N"});
  expect_usage_error({"train", "--augment", "crop=40"}, {"--augment", "a margin from 1 to 16"});
  expect_usage_error({"node", "--role", "worker", "--coordinator-timeout", "-1"}, {"--coordinator-timeout"});
}

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
  temp_file net("# LayerNorm and GELU between two linear layers\nflatten\nlinear 64\nlayernorm\ngelu\nlinear 10\n");
  auto r = run_troupe(with({"train-local", "--model", "file:" + net.path.string()}, quick));
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["model"].get<std::string>() == "layers:flatten; linear 64; layernorm; gelu; linear 10");
  BOOST_TEST(j["test_accuracy"].get<double>() > 0.5);
  temp_file bad("flatten\nlinear 64\ngelu 2\n");
  expect_usage_error({"train-local", "--model", "file:" + bad.path.string()},
                     {"--model", "line 3 ('gelu 2')", "gelu takes no arguments"});
  expect_usage_error({"train-local", "--model", "layers:flatten; dense 10"}, {"layer 1 ('dense 10')", "unknown layer"});
}

// A character-level gpt on a text: bits per character in the JSON line and a sample of
// text at the end; a text that is not UTF-8, or too short for the context, fails with the
// reason and exit code 1.
BOOST_AUTO_TEST_CASE(a_gpt_trains_on_a_text_and_bad_texts_are_named) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  temp_file corpus(text);
  const std::vector<std::string> gpt = {"train-local", "--model", "gpt:layers=1,dim=16,heads=2", "--dataset",
                                        "text:" + corpus.path.string(), "--context", "16", "--epochs", "3",
                                        "--batch-size", "16", "--optimizer", "adamw", "--lr", "0.01", "--sample", "40"};
  auto r = run_troupe(gpt);
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["model"].get<std::string>() == "gpt:layers=1,dim=16,heads=2");
  const double bits = j["validation_bits_per_char"].get<double>();
  BOOST_TEST((bits > 0.0 && bits < std::log2(28.0)));  // below a uniform guess over the 28 characters
  BOOST_TEST(j["sample"].get<std::string>().size() == 41u);  // the first character, then 40 more (ASCII)
  BOOST_TEST(r.err.find("bits per character") != std::string::npos);

  temp_file latin1(std::string(200, 'a') + "caf\xe9");
  auto bad = run_troupe({"train-local", "--model", "gpt:layers=1,dim=16,heads=2", "--dataset",
                         "text:" + latin1.path.string(), "--context", "8"});
  BOOST_TEST(bad.exit_code == 1);
  BOOST_TEST(bad.err.find("not valid UTF-8 at byte 203") != std::string::npos, bad.err);
  auto too_short = run_troupe({"train-local", "--model", "gpt:layers=1,dim=16,heads=2", "--dataset",
                               "text:" + corpus.path.string(), "--context", "1000"});
  BOOST_TEST(too_short.exit_code == 1);
  BOOST_TEST(too_short.err.find("too few for a context of 1000") != std::string::npos, too_short.err);
  BOOST_TEST(too_short.out.empty());
}

BOOST_AUTO_TEST_CASE(config_file_sets_flags_and_the_command_line_wins) {
  temp_file cfg("epochs = 2\nmodel = \"mlp:784-32-10\"\ndataset = \"synthetic\"\ntrain-samples = 1000\n");
  auto r = run_troupe({"train-local", "--config", cfg.path.string()});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["epochs"].get<int>() == 2);
  BOOST_TEST(j["model"].get<std::string>() == "mlp:784-32-10");
  auto over = run_troupe({"train-local", "--config", cfg.path.string(), "--epochs", "1"});
  BOOST_REQUIRE(over.exit_code == 0);
  BOOST_TEST(nlohmann::json::parse(over.out)["epochs"].get<int>() == 1);
}

BOOST_AUTO_TEST_CASE(config_file_rejects_unknown_keys_and_bad_values) {
  temp_file unknown("epochs = 2\nlearning_rate = 0.1\n");
  expect_usage_error({"train-local", "--config", unknown.path.string()}, {"learning_rate"});
  temp_file bad("epochs = -3\n");
  expect_usage_error({"train-local", "--config", bad.path.string()}, {"--epochs"});
  temp_file section("[train]\nepochs = 2\n");
  expect_usage_error({"train-local", "--config", section.path.string()}, {"sections"});
  temp_file flag("nesterov = false\nepochs = 1\ndataset = \"synthetic\"\ntrain-samples = 500\n");
  auto ok = run_troupe({"train-local", "--config", flag.path.string()});
  BOOST_TEST_INFO("stderr: " << ok.err);
  BOOST_TEST(ok.exit_code == 0);
  BOOST_TEST(ok.err.find("nesterov off") != std::string::npos);
  expect_usage_error({"train-local", "--config", "/nonexistent/job.toml"}, {"/nonexistent/job.toml", "no such file"});
  // CLI11's reader called this a bad --epochs value; it is a syntax error at line 1.
  temp_file broken("epochs = \n[[[\n");
  expect_usage_error({"train", "--config", broken.path.string()}, {broken.path.string() + ":1:", "not valid TOML"});
  temp_file typed("epochs = \"2\"\n");
  expect_usage_error({"train", "--config", typed.path.string()}, {"'epochs' takes an integer, not a string"});
  // A directory is not a config file: it used to be read as an empty one, and the
  // default job ran.
  const std::string dir = std::filesystem::temp_directory_path().string();
  for (const char* command : {"train-local", "train", "launch"})
    expect_usage_error({command, "--config", dir}, {dir, "is not a file"});
}

BOOST_AUTO_TEST_CASE(a_misspelled_device_is_a_usage_error) {
  expect_usage_error({"train-local", "--device", "gpu"}, {"--device", "use cpu, cuda or cuda:N"});
  expect_usage_error({"train", "--device", "cuda:x"}, {"--device"});
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
           {"node", "--role", "worker", "--join", "127.0.0.1:9", "--device", "cuda", "--precision", "bf16",
            "--metrics", "off", "--insecure-network", "--secret-file", dir.file("job.secret")}}) {
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

// tls init writes a CA, the job's secret and certificates, private to the user; tls secret
// writes only a secret; neither replaces what exists.
BOOST_AUTO_TEST_CASE(tls_init_and_tls_secret_write_private_files_and_replace_nothing) {
  temp_dir dir("cli-tls");
  const auto mode = [](const std::string& path) {
    struct stat st {};
    BOOST_REQUIRE(stat(path.c_str(), &st) == 0);
    return st.st_mode & 0777;
  };
  const std::string pki = dir.file("pki");
  auto init = run_troupe({"tls", "init", pki, "--node", "w", "--san", "IP:127.0.0.1"});
  BOOST_REQUIRE_MESSAGE(init.exit_code == 0, init.err);
  for (const char* f : {"ca.key", "w.pem", "job.secret"}) BOOST_TEST(mode(pki + "/" + f) == 0600u, f);
  auto again = run_troupe({"tls", "init", pki});
  BOOST_TEST(again.exit_code == 2);
  BOOST_TEST(again.err.find("--force") != std::string::npos, again.err);

  const std::string secret = dir.file("job.secret");
  auto made = run_troupe({"tls", "secret", secret});
  BOOST_REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  BOOST_TEST(mode(secret) == 0600u);
  std::string before;
  std::getline(std::ifstream(secret), before);
  BOOST_TEST(before.size() == 64u);
  auto twice = run_troupe({"tls", "secret", secret});
  BOOST_TEST(twice.exit_code == 1);
  BOOST_TEST(twice.err.find(secret) != std::string::npos, twice.err);
  std::string after;
  std::getline(std::ifstream(secret), after);
  BOOST_TEST(after == before);
}

// A shard server's lane port (Note [Bulk lanes]): one that is not a port is a usage error,
// and one that another socket holds stops the node before it joins, saying which flag.
BOOST_AUTO_TEST_CASE(a_bad_or_taken_lane_port_is_named) {
  temp_dir dir("cli-lane-port");
  const std::string secret = dir.file("job.secret");
  BOOST_REQUIRE(run_troupe({"tls", "secret", secret}).exit_code == 0);
  const std::vector<std::string> server = {"node", "--role", "server", "--join", "127.0.0.1:1",
                                           "--insecure-network", "--secret-file", secret, "--metrics", "off"};
  expect_usage_error(with(server, {"--lane-port", "seventy"}), {"--lane-port", "'seventy'"});

  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  BOOST_REQUIRE(::bind(held, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(held, 1) == 0);
  BOOST_REQUIRE(::getsockname(held, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  auto r = run_troupe(with(server, {"--lane-port", std::to_string(ntohs(a.sin_port))}), 30s);
  ::close(held);
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("cannot listen for bulk lanes") != std::string::npos);
  BOOST_TEST(r.err.find("(--lane-port)") != std::string::npos);
}

// --job-id names a train job's metrics; --metrics-linger is checked, and launch hands it
// on to every node it starts (Note [Job state and linger]).
BOOST_AUTO_TEST_CASE(job_id_and_metrics_linger_are_checked_and_passed_on) {
  expect_usage_error(with({"train", "--job-id", "two words"}, quick), {"--job-id", "spaces"});
  expect_usage_error(with({"train", "--job-id", ""}, quick), {"--job-id"});
  expect_usage_error(with({"train", "--metrics-linger", "-1"}, quick), {"--metrics-linger"});
  expect_usage_error(with({"node", "--role", "server", "--metrics-linger", "soon"}, quick), {"--metrics-linger"});
  temp_dir dir("cli-linger");
  auto r = run_troupe({"launch", "--local", "--dry-run", "--workers", "1", "--servers", "1", "--metrics-linger", "2.5",
                       "--job-dir", dir.file("job")});
  BOOST_REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string all = r.out + r.err;
  std::size_t passed = 0;
  for (std::size_t at = all.find("--metrics-linger 2.5"); at != std::string::npos;
       at = all.find("--metrics-linger 2.5", at + 1))
    ++passed;
  BOOST_TEST(passed == 3u, all);  // coordinator, server, worker
}

// Note [Nodes die with their launcher]: a node started with --stop-when-stdin-closes (as
// launch starts remote nodes over ssh) stops when its stdin ends, here while it is still
// trying to reach a coordinator it would otherwise wait 60 s for.
BOOST_AUTO_TEST_CASE(a_node_stops_when_its_stdin_closes) {
  temp_dir dir("cli-stdin");
  const std::string secret = dir.file("job.secret");
  BOOST_REQUIRE(run_troupe({"tls", "secret", secret}).exit_code == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_process({"/bin/sh", "-c",
                        "sleep 1 | " + troupe_bin() + " node --role worker --join 127.0.0.1:1 --insecure-network "
                        "--secret-file " + secret + " --metrics off --connect-timeout 60 --stop-when-stdin-closes"},
                       90s);
  const auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_TEST(r.exit_code == 1);
  BOOST_TEST(r.err.find("stdin closed") != std::string::npos);
  BOOST_TEST(took < 20s);
}

// A trace that could not be written used to cost a whole job and still exit 0: the path
// is checked before anything trains, for train and for launch's merged trace.
BOOST_AUTO_TEST_CASE(an_unwritable_trace_path_is_refused_before_any_training) {
  temp_dir dir("cli-trace");
  for (const std::string& bad : {std::string("/nonexistent-dir/trace.json"), dir.path.string()}) {
    auto r = run_troupe(with({"train", "--trace", bad}, quick));
    BOOST_TEST_INFO("stderr: " << r.err);
    BOOST_TEST(r.exit_code == 2);
    BOOST_TEST(r.err.find("--trace: cannot write " + bad) != std::string::npos);
    BOOST_TEST(r.out.find('{') == std::string::npos);  // no job ran
    auto l = run_troupe(with({"launch", "--local", "--trace", bad}, quick));
    BOOST_TEST_INFO("stderr: " << l.err);
    BOOST_TEST(l.exit_code == 2);
    BOOST_TEST(l.err.find("--trace: cannot write " + bad) != std::string::npos);
  }
  BOOST_TEST(!std::filesystem::exists("/nonexistent-dir"));
}
