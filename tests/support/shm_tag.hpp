// Test helper: a fresh job tag for shared-memory segments (16 random hex digits), so two
// test runs on one machine never see each other's segments in /dev/shm.
#pragma once

#include <cstdio>
#include <random>
#include <string>

namespace troupe::test {

inline std::string fresh_shm_tag() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", static_cast<unsigned>(rd()), static_cast<unsigned>(rd()));
  return buf;
}

}  // namespace troupe::test
