// job_dirs: the job directories `troupe launch` makes under TMPDIR (troupe-job-*), which
// hold a job's CA key. Each is marked with its launcher (launcher.pid: the process id and
// its start time, so a reused id is not taken for the launcher), and a launcher that
// starts removes those of launchers that are gone: one killed with SIGKILL cannot remove
// its own. Only directories of this user, named as launch names them, with a mark, are
// touched.
#pragma once

#include <string>
#include <vector>

#include "base/expected.hpp"

namespace troupe::cli {

// A fresh job directory for job `job_id` ("job-..."; the directory is troupe-job-...)
// under `base`, mode 0700, marked as this process's.
expected<std::string> make_job_dir(const std::string& base, const std::string& job_id);

// Marks `dir` as the job directory of this process.
expected<bool> mark_job_dir(const std::string& dir);

// Removes the marked job directories under `base` whose launcher is gone; returns them.
std::vector<std::string> sweep_job_dirs(const std::string& base);

}  // namespace troupe::cli
