// lane_listener: the listening end of bulk lanes (a shard's from its members, or a
// member's from its previous ring replica). An acceptor thread takes
// connections (at most max_pending_hellos between accept and welcome; more are closed at
// once); a thread per connection runs its TLS handshake and reads its hello within the
// handshake timeout, welcomes it only under a token offered to a member (once per
// direction, before the offer expires, and with TLS only from a worker's certificate),
// and then reads that member's gradients or writes its pull answers. Everything else is
// closed and counted as a refusal (lane_refused), logged once per peer.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "monitoring/refusals.hpp"
#include "transport/lane_frame.hpp"
#include "transport/lane_io.hpp"
#include "transport/lane_transport.hpp"

namespace troupe::lane {

namespace {

// A socket bound and listening on host:port, or why not.
expected<int> bind_listener(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int e = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found);
      e != 0)
    return failure{"cannot resolve " + host + ": " + ::gai_strerror(e)};
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return failure{"cannot listen for bulk lanes on " + host + ":" + std::to_string(port) + ": " + why};
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(a).sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in&>(a).sin_port);
}

class listener final : public listening_end {
 public:
  // fd: the listening socket; wake: an eventfd that stops the acceptor. Owns both.
  listener(int fd, int wake, transport_options o) : fd_(fd), wake_(wake), port_(bound_port(fd)), o_(std::move(o)) {
    ignore_sigpipe();
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~listener() override {
    {
      std::lock_guard l(mu_);
      stopping_ = true;
      for (int fd : unwelcomed_) ::shutdown(fd, SHUT_RDWR);
      for (auto& [rank, o] : offers_) o.lane->close();
      for (auto& [rank, lane] : lanes_) lane->close();
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_, &one, sizeof one);
    acceptor_.join();
    threads_.join_all();
    ::close(fd_);
    ::close(wake_);
  }

  std::uint16_t port() const override { return port_; }

  void start(handlers h) override {
    std::lock_guard l(mu_);
    h_ = std::move(h);
  }

  expected<lane_offer> offer(std::uint32_t rank) override {
    auto key = random_token();
    if (!key) return key.error();
    std::shared_ptr<lane_pair> replaced;
    {
      std::lock_guard l(mu_);
      if (auto it = lanes_.find(rank); it != lanes_.end()) {
        replaced = it->second;
        lanes_.erase(it);
      }
      if (auto it = offers_.find(rank); it != offers_.end()) it->second.lane->close();
      offers_[rank] = {*key, steady::now() + offer_lifetime, {false, false}, std::make_shared<lane_pair>(rank)};
    }
    if (replaced) replaced->close();  // the member asks again only once its lane is gone
    return lane_offer{port_, std::string(key->begin(), key->end())};
  }

  bool send(std::uint32_t rank, std::uint64_t ticket, tensor&& payload) override {
    std::shared_ptr<lane_pair> lane;
    {
      std::lock_guard l(mu_);
      if (auto it = lanes_.find(rank); it != lanes_.end()) lane = it->second;
    }
    return lane && lane->open() && lane->push(ticket, std::move(payload));
  }

  void drop(std::uint32_t rank, const std::string& why) override {
    std::shared_ptr<lane_pair> lane;
    {
      std::lock_guard l(mu_);
      if (auto it = lanes_.find(rank); it != lanes_.end()) {
        lane = it->second;
        lanes_.erase(it);
      }
      if (auto it = offers_.find(rank); it != offers_.end()) {
        it->second.lane->close();
        offers_.erase(it);
      }
    }
    if (lane && lane->close())
      spdlog::info("{}: closed the bulk lane of {} {}: {}", o_.listener_name, o_.peer_name, rank, why);
  }

 private:
  struct pending_offer {
    token key{};
    steady::time_point until;
    bool shown[2] = {false, false};  // by direction
    std::shared_ptr<lane_pair> lane;
  };

  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{fd_, POLLIN, 0}, {wake_, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
      if (p[1].revents) return;
      if (!(p[0].revents & POLLIN)) continue;
      const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) ::usleep(10000);  // out of descriptors: let some close
        continue;
      }
      std::lock_guard l(mu_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      if (unwelcomed_.size() >= max_pending_hellos) {
        refuse(peer_address_of(fd), "more than " + std::to_string(max_pending_hellos) + " connections awaiting a hello");
        ::close(fd);
        continue;
      }
      unwelcomed_.insert(fd);
      threads_.spawn([this, fd] { serve(fd); });
    }
  }

  void refuse(const std::string& peer, const std::string& why) const {
    if (monitoring::count_refusal(monitoring::refusal::lane_refused, peer))
      spdlog::warn("{}: refused a bulk lane connection from {}: {}; further refusals of this peer are counted in "
                   "troupe_refusals_total, not logged",
                   o_.listener_name, peer.empty() ? "an unknown peer" : peer, why);
  }

  // The member and lane whose offer `key` is, for a connection going `way`; nullopt when no
  // live offer has that token or it was shown for that direction already.
  std::optional<std::pair<std::uint32_t, std::shared_ptr<lane_pair>>> redeem(const token& key, direction way) {
    std::lock_guard l(mu_);
    const auto now = steady::now();
    for (auto it = offers_.begin(); it != offers_.end(); ++it) {
      auto& o = it->second;
      if (!tokens_equal(o.key, key) || o.until < now) continue;
      const int d = static_cast<int>(way);
      if (o.shown[d]) return std::nullopt;
      o.shown[d] = true;
      auto out = std::make_pair(it->first, o.lane);
      if (o.shown[0] && o.shown[1]) {
        lanes_[it->first] = o.lane;
        offers_.erase(it);
      }
      return out;
    }
    return std::nullopt;
  }

  // The hello of a new connection: its direction and the member and lane it joins, or why not.
  expected<std::tuple<direction, std::uint32_t, std::shared_ptr<lane_pair>>> hello(lane_stream& s,
                                                                                    steady::time_point deadline) {
    header_bytes_t raw{};
    if (auto e = s.read(raw.data(), raw.size(), {deadline, {}})) return failure{"no hello: " + *e};
    auto h = decode_header(raw, 0);
    if (!h) return failure{h.error().message};
    if (h->kind != frame_kind::hello) return failure{"the first frame is not a hello"};
    token key{};
    if (auto e = s.read(key.data(), key.size(), {deadline, {}})) return failure{"no token: " + *e};
    if (o_.tls) {
      const std::string role = s.peer_role();
      if (role != "worker" && role != any_role)
        return failure{"its certificate is for " + (role.empty() ? std::string("no role") : "the role " + role) +
                       ", not a worker's"};
    }
    auto found = redeem(key, h->way);
    if (!found) return failure{"its token is not one this " + o_.listener_name + " offered, has expired, or was used"};
    return std::make_tuple(h->way, found->first, std::move(found->second));
  }

  void serve(int fd) {
    lane_stream s = lane_stream::adopt(fd);
    const unlisted until_welcomed{*this, fd};  // goes before s closes fd
    const auto deadline = steady::now() + o_.handshake_timeout;
    auto joined = [&]() -> expected<std::tuple<direction, std::uint32_t, std::shared_ptr<lane_pair>>> {
      if (auto e = s.accept_tls(o_.tls, deadline)) return failure{"TLS: " + *e};
      return hello(s, deadline);
    }();
    if (!joined) return refuse(s.peer(), joined.error().message);
    auto [way, rank, lane] = std::move(*joined);
    if (!lane->attach(fd)) return;
    // The member dials its answer connection second and sends as soon as that is welcomed,
    // so the lane is open here before the welcome goes.
    if (way == direction::to_member) lane->set_open();
    const auto welcome = encode_header(welcome_header());
    std::optional<std::string> why = s.write(welcome.data(), welcome.size(), {deadline, {}});
    if (!why) why = s.seal(false);
    forget_unwelcomed(fd);
    if (!why) {
      if (way == direction::to_shard)
        why = read_payloads(s, o_.idle_timeout, o_.scan_finite, [&](std::uint64_t ticket, arrival a) {
          if (h_.payload) h_.payload(rank, ticket, std::move(a));
        });
      else
        why = write_payloads(s, *lane, o_.idle_timeout);
    }
    lane->detach(fd);
    closed(rank, lane, why.value_or("closed"));
  }

  void forget_unwelcomed(int fd) {
    std::lock_guard l(mu_);
    unwelcomed_.erase(fd);
  }
  // Takes an accepted socket off the unwelcomed list when serve() ends, before its stream
  // closes it (the number may be reused at once).
  struct unlisted {
    listener& owner;
    int fd;
    ~unlisted() { owner.forget_unwelcomed(fd); }
  };

  // A connection of `lane` ended: the lane closes, and if it is still member rank's the
  // shell hears why.
  void closed(std::uint32_t rank, const std::shared_ptr<lane_pair>& lane, const std::string& why) {
    if (!lane->close()) return;
    {
      std::lock_guard l(mu_);
      auto it = lanes_.find(rank);
      if (it == lanes_.end() || it->second != lane) return;
      lanes_.erase(it);
    }
    if (h_.closed) h_.closed(rank, why);
  }

  const int fd_;
  const int wake_;
  const std::uint16_t port_;
  const transport_options o_;
  std::mutex mu_;
  handlers h_;
  bool stopping_ = false;
  std::set<int> unwelcomed_;  // accepted, not yet welcomed or refused
  std::map<std::uint32_t, pending_offer> offers_;
  std::map<std::uint32_t, std::shared_ptr<lane_pair>> lanes_;  // by member rank, both connections welcomed
  std::thread acceptor_;
  thread_set threads_;
};

}  // namespace

expected<std::shared_ptr<listening_end>> listen_for_members(const std::string& host, std::uint16_t port,
                                                            transport_options o) {
  auto fd = bind_listener(host, port);
  if (!fd) return fd.error();
  const int wake = ::eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    ::close(*fd);
    return failure{std::string("cannot listen for bulk lanes: eventfd: ") + std::strerror(errno)};
  }
  return std::shared_ptr<listening_end>(std::make_shared<listener>(*fd, wake, std::move(o)));
}

}  // namespace troupe::lane
