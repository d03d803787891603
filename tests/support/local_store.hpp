// Test helpers for the kvstore tests on in-process shards: a local group's options, and the
// kv::error a call throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "client/kvstore.hpp"

namespace troupe::test {

// A local group in `mode` on `servers` shards, whose calls wait at most 5 s.
inline kv::options opts(const std::string& mode, std::uint32_t servers = 1) {
  kv::options o;
  o.mode = mode;
  o.servers = servers;
  o.timeout = std::chrono::milliseconds(5000);
  return o;
}

// The code of the kv::error that f throws, and its message; "no error" when it throws none.
template <class F>
std::pair<std::string, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const kv::error& e) {
    return {e.code(), e.what()};
  }
  return {"no error", ""};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace troupe::test
