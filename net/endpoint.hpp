// HOST:PORT endpoints as nodes name them on the command line, and the loopback test that
// decides whether a node may run without TLS.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/expected.hpp"

namespace troupe {

struct endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string str() const;  // "host:port", IPv6 hosts in brackets
};

// Parses "HOST:PORT", "[V6]:PORT" or ":PORT" (host defaults to default_host). `what`
// names the flag in error messages.
expected<endpoint> parse_endpoint(std::string_view text, std::string_view what, std::string_view default_host = "127.0.0.1");

// 127.0.0.0/8, ::1 and "localhost": addresses only this machine can reach.
bool is_loopback(std::string_view host);

}  // namespace troupe
