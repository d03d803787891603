// durable_file: writing a file so that its path holds either the old contents or all of
// the new ones, whatever happens meanwhile (a crash, a full disk, a killed process).
//
// Note [Durable replace]
// The bytes go to a temporary beside the file (".NAME.tmp-PID-N": the same directory, so
// the rename is atomic), created with mode 0600 (a job's files are its own). commit()
// fsyncs it, renames it over the file and fsyncs the directory, so the rename itself
// survives a power cut. Until the rename the old file is untouched; a failure at any step
// removes the temporary and says which step failed on which path and why. A process
// killed before its rename leaves its temporary behind: sweep_temporaries removes those
// whose writer is gone.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "base/expected.hpp"

namespace troupe {

class durable_file {
 public:
  // Opens the temporary for `path`; fails naming the directory when it cannot.
  static expected<durable_file> create(std::filesystem::path path);
  durable_file(durable_file&& other) noexcept;
  durable_file& operator=(durable_file&& other) noexcept;
  durable_file(const durable_file&) = delete;
  durable_file& operator=(const durable_file&) = delete;
  // Removes the temporary unless committed: the old file stays as it was.
  ~durable_file();

  // Appends n bytes; why not (a full disk, a size limit), after which only destruction is left.
  std::optional<std::string> write(const void* data, std::size_t n);
  // Makes the new contents the file's, durably; why not (the old file is then untouched).
  std::optional<std::string> commit();

  const std::filesystem::path& path() const { return path_; }

 private:
  durable_file(std::filesystem::path path, std::filesystem::path tmp, int fd);
  void discard();
  std::filesystem::path path_, tmp_;
  int fd_ = -1;
};

// Writes `n` bytes to `path` through a durable_file; why not.
std::optional<std::string> write_file_durably(const std::filesystem::path& path, const void* data, std::size_t n);

// Removes the temporaries durable_file left in `dir` whose writing process is gone (one
// killed before its rename); how many it removed.
std::size_t sweep_temporaries(const std::filesystem::path& dir);

}  // namespace troupe
