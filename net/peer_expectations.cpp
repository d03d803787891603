// peer_expectations: declared peers by resolved address.
#include "net/peer_expectations.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <map>
#include <mutex>
#include <utility>

namespace troupe {

namespace {

struct registry {
  std::mutex mutex;
  std::map<std::pair<std::string, std::uint16_t>, peer_expectation> by_address;
};

registry& the_registry() {
  static auto* r = new registry;  // never destroyed: the transport may dial during exit
  return *r;
}

std::string numeric(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text);
  else if (a->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof text);
  return text;
}

}  // namespace

bool expect_peer(const std::string& host, std::uint16_t port, const std::string& role) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next)
    if (const std::string ip = numeric(a->ai_addr); !ip.empty()) r.by_address[{ip, port}] = {host, role};
  freeaddrinfo(found);
  return true;
}

std::optional<peer_expectation> expectation_for(const std::string& ip, std::uint16_t port) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  const auto e = r.by_address.find({ip, port});
  if (e == r.by_address.end()) return std::nullopt;
  return e->second;
}

}  // namespace troupe
