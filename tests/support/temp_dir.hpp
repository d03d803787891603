// Test helper: a directory of this test process's own under the system's temporary
// directory (its name carries the pid, so two test runs on one machine never share one),
// created on construction and removed with everything in it on destruction; files in it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace troupe::test {

struct temp_dir {
  std::filesystem::path path;

  explicit temp_dir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("troupe-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `content` to the file `name` in this directory; its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return file(name);
  }
};

}  // namespace troupe::test
