// Tests for tools/config_file.cpp: --config read as TOML onto a command's options. A
// syntax error names the file, line and column; a key of the wrong type names the key
// and the type it takes; unknown keys, sections and arrays for one value are refused with
// their line; the command line wins; toml_line writes numbers as numbers and reads back.
#define BOOST_TEST_MODULE config_file
#include <boost/test/unit_test.hpp>

#include <fstream>

#include "tests/support/temp_dir.hpp"
#include "tools/config_file.hpp"

using namespace troupe::cli;

namespace {

// A command with one option of each kind, as the real ones have.
struct command {
  CLI::App app{"test", "troupe-test"};
  int epochs = 1;
  double lr = 0.05;
  std::string model = "mlp";
  bool nesterov = true;
  std::uint32_t workers = 2;
  command() {
    app.add_option("--epochs", epochs)->check(CLI::Range(1, 100));
    app.add_option("--lr", lr);
    app.add_option("--model", model);
    app.add_flag("--nesterov,!--no-nesterov", nesterov);
    app.add_option("--workers", workers);
    add_config_option(app);
  }
};

struct fixture {
  troupe::test::temp_dir dir{"config-file"};
  int files = 0;
  std::string write(const std::string& text) {
    const std::string path = dir.file("job-" + std::to_string(files++) + ".toml");
    std::ofstream(path) << text;
    return path;
  }
  // Parses `args` and applies the config file; the error's text, or "" when it applied.
  std::string run(command& c, std::vector<std::string> args) {
    std::vector<const char*> argv{"troupe-test"};
    for (const auto& a : args) argv.push_back(a.c_str());
    try {
      c.app.parse(static_cast<int>(argv.size()), argv.data());
      apply_config_file(c.app);
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return {};
  }
  std::string apply(command& c, const std::string& text, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--config", write(text)};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(c, args);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(config_file, fixture)

BOOST_AUTO_TEST_CASE(values_of_each_kind_set_their_options) {
  command c;
  BOOST_TEST(apply(c, "epochs = 7\nlr = 1\nmodel = \"cnn\"\nnesterov = false\nworkers = 4\n# a comment\n") == "");
  BOOST_TEST(c.epochs == 7);
  BOOST_TEST(c.lr == 1.0);  // an integer where a number is taken
  BOOST_TEST(c.model == "cnn");
  BOOST_TEST(!c.nesterov);
  BOOST_TEST(c.workers == 4u);
  command empty;
  BOOST_TEST(apply(empty, "") == "");  // an empty file is valid TOML and changes nothing
  BOOST_TEST(empty.epochs == 1);
}

BOOST_AUTO_TEST_CASE(the_command_line_wins) {
  command c;
  BOOST_TEST(apply(c, "epochs = 7\nlr = 0.5\n", {"--epochs", "3"}) == "");
  BOOST_TEST(c.epochs == 3);
  BOOST_TEST(c.lr == 0.5);
}

// CLI11's reader took `epochs = ` and `[[[` for a bad --epochs value; a TOML parser names
// the place.
BOOST_AUTO_TEST_CASE(a_syntax_error_names_file_line_and_column) {
  command c;
  const std::string path = dir.file("job-0.toml");
  const std::string why = apply(c, "lr = 0.1\nepochs = \n[[[\n");
  BOOST_TEST(why.find(path + ":2:") != std::string::npos, why);
  BOOST_TEST(why.find("not valid TOML") != std::string::npos, why);
  command d;
  const std::string unclosed = apply(d, "model = \"mlp\n");
  BOOST_TEST(unclosed.find(":1:") != std::string::npos, unclosed);
}

BOOST_AUTO_TEST_CASE(a_wrong_type_names_the_key_and_the_type_it_takes) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"epochs = \"three\"\n", {"'epochs' takes an integer, not a string", ":1:1"}},
      {"lr = 0.1\nepochs = 2.5\n", {"'epochs' takes an integer, not a floating-point number", ":2:1"}},
      {"lr = \"fast\"\n", {"'lr' takes a number, not a string"}},
      {"model = true\n", {"'model' takes a string, not a boolean"}},
      {"nesterov = 1\n", {"'nesterov' takes true or false, not an integer", "nesterov = false"}},
      {"workers = 1979-05-27\n", {"'workers' takes an integer, not a date or time"}},
      {"epochs = [1, 2]\n", {"'epochs' takes one value, not an array"}},
  };
  for (const auto& [text, fragments] : cases) {
    command c;
    const std::string why = apply(c, text);
    for (const auto& f : fragments) BOOST_TEST(why.find(f) != std::string::npos, text << " -> " << why);
  }
}

BOOST_AUTO_TEST_CASE(unknown_keys_sections_and_checks_name_their_line) {
  command c;
  std::string why = apply(c, "epochs = 2\nlearning_rate = 0.1\n");
  BOOST_TEST(why.find(":2:1: unknown key 'learning_rate'") != std::string::npos, why);
  command d;
  why = apply(d, "[train]\nepochs = 2\n");
  BOOST_TEST(why.find("sections such as [train]") != std::string::npos, why);
  command e;
  why = apply(e, "lr = 0.1\n\nepochs = 0\n");  // the option's own range check
  BOOST_TEST(why.find(":3:1:") != std::string::npos, why);
  BOOST_TEST(why.find("--epochs") != std::string::npos, why);
  command f;
  why = apply(f, "config = \"other.toml\"\n");
  BOOST_TEST(why.find("unknown key 'config'") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(missing_and_unreadable_files_are_named) {
  command c;
  std::string why = run(c, {"--config", dir.file("absent.toml")});
  BOOST_TEST(why.find("absent.toml: no such file") != std::string::npos, why);
  command d;
  why = run(d, {"--config", dir.path.string()});
  BOOST_TEST(why.find("is not a file") != std::string::npos, why);
}

// launch writes the command line's job options into job.toml with toml_line: numbers as
// numbers, flags as booleans, text quoted (and escaped); the coordinator reads it back.
BOOST_AUTO_TEST_CASE(options_written_as_toml_read_back_the_same) {
  command given;
  BOOST_TEST(run(given, {"--epochs", "9", "--lr", "1e-3", "--model", "say \"hi\"\\", "--no-nesterov", "--workers", "3"}) ==
             "");
  std::string text;
  for (const char* name : {"--epochs", "--lr", "--model", "--nesterov", "--workers"})
    text += toml_line(*given.app.get_option(name));
  BOOST_TEST(text.find("epochs = 9\n") != std::string::npos, text);
  BOOST_TEST(text.find("lr = 1e-3\n") != std::string::npos, text);
  BOOST_TEST(text.find("nesterov = false\n") != std::string::npos, text);
  BOOST_TEST(text.find("workers = 3\n") != std::string::npos, text);
  BOOST_TEST(text.find("model = \"say \\\"hi\\\"\\\\\"\n") != std::string::npos, text);
  BOOST_TEST(toml_line(*given.app.get_option("--config")) == "");  // not given
  command read;
  BOOST_TEST(apply(read, text) == "");
  BOOST_TEST(read.epochs == 9);
  BOOST_TEST(read.lr == 1e-3);
  BOOST_TEST(read.model == "say \"hi\"\\");
  BOOST_TEST(!read.nesterov);
  BOOST_TEST(read.workers == 3u);
}

BOOST_AUTO_TEST_SUITE_END()
