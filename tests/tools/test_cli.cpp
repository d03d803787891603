// End-to-end tests of the troupe binary's command line (tools/main.cpp, cli_common.cpp):
// --help lists the commands; bad flags and values exit 2 naming the flag and the allowed
// values; config files are strict and the command line wins over them; --job-id,
// --metrics-linger and --trace are checked before work starts, and launch hands
// --metrics-linger on to its nodes. Each command's own runs: test_cmd_train_local.cpp,
// test_cmd_train.cpp, test_cmd_tls.cpp, test_cmd_node.cpp. Every run has a deadline.
#define BOOST_TEST_MODULE cli
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"
#include "tests/support/troupe_run.hpp"

using namespace troupe::test;

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

BOOST_AUTO_TEST_CASE(config_file_sets_flags_and_the_command_line_wins) {
  temp_dir files("cli-config");
  const std::string cfg =
      files.write("cfg.toml", "epochs = 2\nmodel = \"mlp:784-32-10\"\ndataset = \"synthetic\"\ntrain-samples = 1000\n");
  auto r = run_troupe({"train-local", "--config", cfg});
  BOOST_TEST_INFO("stderr: " << r.err);
  BOOST_REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["epochs"].get<int>() == 2);
  BOOST_TEST(j["model"].get<std::string>() == "mlp:784-32-10");
  auto over = run_troupe({"train-local", "--config", cfg, "--epochs", "1"});
  BOOST_REQUIRE(over.exit_code == 0);
  BOOST_TEST(nlohmann::json::parse(over.out)["epochs"].get<int>() == 1);
}

BOOST_AUTO_TEST_CASE(config_file_rejects_unknown_keys_and_bad_values) {
  temp_dir files("cli-config-bad");
  const std::string unknown = files.write("unknown.toml", "epochs = 2\nlearning_rate = 0.1\n");
  expect_usage_error({"train-local", "--config", unknown}, {"learning_rate"});
  const std::string bad = files.write("bad.toml", "epochs = -3\n");
  expect_usage_error({"train-local", "--config", bad}, {"--epochs"});
  const std::string section = files.write("section.toml", "[train]\nepochs = 2\n");
  expect_usage_error({"train-local", "--config", section}, {"sections"});
  const std::string flag =
      files.write("flag.toml", "nesterov = false\nepochs = 1\ndataset = \"synthetic\"\ntrain-samples = 500\n");
  auto ok = run_troupe({"train-local", "--config", flag});
  BOOST_TEST_INFO("stderr: " << ok.err);
  BOOST_TEST(ok.exit_code == 0);
  BOOST_TEST(ok.err.find("nesterov off") != std::string::npos);
  expect_usage_error({"train-local", "--config", "/nonexistent/job.toml"}, {"/nonexistent/job.toml", "no such file"});
  // CLI11's reader called this a bad --epochs value; it is a syntax error at line 1.
  const std::string broken = files.write("broken.toml", "epochs = \n[[[\n");
  expect_usage_error({"train", "--config", broken}, {broken + ":1:", "not valid TOML"});
  const std::string typed = files.write("typed.toml", "epochs = \"2\"\n");
  expect_usage_error({"train", "--config", typed}, {"'epochs' takes an integer, not a string"});
  // A directory is not a config file: it used to be read as an empty one, and the
  // default job ran.
  const std::string dir = files.path.string();
  for (const char* command : {"train-local", "train", "launch"})
    expect_usage_error({command, "--config", dir}, {dir, "is not a file"});
}

BOOST_AUTO_TEST_CASE(a_misspelled_device_is_a_usage_error) {
  expect_usage_error({"train-local", "--device", "gpu"}, {"--device", "use cpu, cuda or cuda:N"});
  expect_usage_error({"train", "--device", "cuda:x"}, {"--device"});
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
