// The troupe command-line entry point: registers the subcommands, parses, maps parse
// errors to exit code 2 and runs the chosen command.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <iostream>
#include <vector>

#include "net/node_runtime.hpp"
#include "tools/config_file.hpp"
#include "tools/cli_common.hpp"
#include "tools/cmd_evaluate.hpp"
#include "tools/cmd_export.hpp"
#include "tools/cmd_launch.hpp"
#include "tools/cmd_node.hpp"
#include "tools/cmd_tls.hpp"
#include "tools/cmd_train.hpp"
#include "tools/cmd_train_local.hpp"
#include "troupe_version.hpp"

int main(int argc, char** argv) {
  using namespace troupe::cli;
  troupe::tune_allocator();  // every command moves large buffers
  CLI::App app{"Troupe trains neural networks on a cluster of actors.\n"
               "Exit codes: 0 success, 1 the job failed, 2 bad command line or config file, 3 (a coordinator)\n"
               "the job lost a node and may go on from its last checkpoint.",
               "troupe"};
  // Logs go to stderr; stdout carries only each command's final JSON line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("troupe"));
  spdlog::set_pattern("troupe: %l: %v");
  app.require_subcommand(1, 1);
  const std::string version = "troupe " TROUPE_VERSION " (commit " TROUPE_COMMIT ")";
  app.set_version_flag("--version", version);
  std::vector<command> commands;
  commands.push_back(add_train(app));
  commands.push_back(add_train_local(app));
  commands.push_back(add_evaluate(app));
  commands.push_back(add_export(app));
  commands.push_back(add_node(app));
  commands.push_back(add_launch(app));
  commands.push_back(add_tls(app));
  for (auto& c : commands) c.app->set_version_flag("--version", version);  // `troupe node --version` too

  try {
    app.parse(argc, argv);
    for (auto& c : commands)
      if (c.app->parsed()) apply_config_file(*c.app);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? exit_ok : exit_usage;
  }
  for (auto& c : commands) {
    if (!c.app->parsed()) continue;
    try {
      return c.run();
    } catch (const std::exception& e) {
      print_error(std::string("internal error: ") + e.what());
      return exit_failed;
    }
  }
  return exit_usage;
}
