// endpoint parsing and loopback detection.
#include "net/endpoint.hpp"

#include <arpa/inet.h>

#include <charconv>

namespace troupe {

std::string endpoint::str() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

expected<endpoint> parse_endpoint(std::string_view text, std::string_view what, std::string_view default_host) {
  auto bad = [&](const std::string& why) {
    return failure{std::string(what) + ": '" + std::string(text) + "' " + why + "; expected HOST:PORT, e.g. 127.0.0.1:7070"};
  };
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("has no port");
  std::string_view host = text.substr(0, colon), port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string_view::npos) return bad("is an IPv6 address without brackets");
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535) return bad("has no valid port");
  endpoint e;
  e.host = host.empty() ? std::string(default_host) : std::string(host);
  e.port = static_cast<std::uint16_t>(port);
  return e;
}

bool is_loopback(std::string_view host) {
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace troupe
