// peer_certificates: certificates by socket, sockets by node.
#include "net/peer_certificates.hpp"

#include <map>
#include <mutex>
#include <utility>

namespace troupe {

namespace {

struct registry {
  std::mutex mutex;
  std::map<int, peer_certificate> by_fd;
  std::map<int, std::string> node_of_fd;
  std::map<std::string, peer_certificate> by_node;
};

registry& the_registry() {
  static auto* r = new registry;  // never destroyed: the transport may close sockets during exit
  return *r;
}

}  // namespace

void record_handshake(int fd, peer_certificate c) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.by_fd[fd] = std::move(c);
}

void forget_handshake(int fd) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.by_fd.erase(fd);
}

void record_route(int fd, const std::string& node) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.node_of_fd[fd] = node;
  if (const auto c = r.by_fd.find(fd); c != r.by_fd.end())
    r.by_node[node] = c->second;
  else
    r.by_node.erase(node);  // a connection without TLS: no certificate
}

void forget_route(int fd) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  const auto n = r.node_of_fd.find(fd);
  if (n == r.node_of_fd.end()) return;
  const std::string node = n->second;
  r.node_of_fd.erase(n);
  for (const auto& [other_fd, other_node] : r.node_of_fd)
    if (other_node == node) return;  // the node has moved to a newer connection
  r.by_node.erase(node);
}

std::optional<peer_certificate> certificate_of(const std::string& node) {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  const auto c = r.by_node.find(node);
  if (c == r.by_node.end()) return std::nullopt;
  return c->second;
}

}  // namespace troupe
