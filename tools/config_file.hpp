// --config FILE: a TOML file (parsed with toml++) whose top-level keys are a command's
// long flag names, and the other way round, a command's options written as such a file
// (launch's job.toml). Flags given on the command line win over the file.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace troupe::cli {

// Registers --config FILE on `app`.
void add_config_option(CLI::App& app);

// Reads the file named by app's --config, if one was given, and sets every option the
// command line left unset. Throws CLI::FileError (no such file, a directory, unreadable)
// or CLI::ConfigError, whose message names the file and, for a syntax error, the line and
// column; for a key that is not a flag, a section, or a value of the wrong type, the key,
// its line and what it should be.
void apply_config_file(CLI::App& app);

// `key = value` for an option given on the command line: numbers bare when the option
// takes a number, true/false for a flag, a quoted string otherwise; "" when none given.
std::string toml_line(const CLI::Option& opt);

}  // namespace troupe::cli
