// lane_dialler: a member's end of the bulk lanes. Opening a lane to a shard dials its two
// connections in the background (gradients first, then answers; TLS: the shard must show
// a server's certificate for the host dialled, a ring neighbour a worker's), shows the
// offer's token in a hello on each and waits for the welcomes, all within the handshake
// timeout; then one thread writes the member's gradients and another reads the shard's
// answers until the lane closes.
#include <spdlog/spdlog.h>

#include <map>

#include "transport/lane_frame.hpp"
#include "transport/lane_io.hpp"
#include "transport/lane_transport.hpp"

namespace troupe::lane {

namespace {

class dialler final : public member_end {
 public:
  explicit dialler(transport_options o) : o_(std::move(o)) { ignore_sigpipe(); }

  ~dialler() override {
    {
      std::lock_guard l(mu_);
      for (auto& [shard, lane] : lanes_) lane->close();
    }
    threads_.join_all();
  }

  void start(handlers h) override {
    std::lock_guard l(mu_);
    h_ = std::move(h);
  }

  void open(std::uint32_t shard, const std::string& host, const lane_offer& offer) override {
    auto lane = std::make_shared<lane_pair>(shard);
    std::shared_ptr<lane_pair> old;
    {
      std::lock_guard l(mu_);
      old = std::exchange(lanes_[shard], lane);
    }
    if (old) old->close();
    threads_.spawn([this, lane, host, offer] { run(lane, host, offer); });
  }

  bool send(std::uint32_t shard, std::uint64_t ticket, tensor&& payload) override {
    std::shared_ptr<lane_pair> lane;
    {
      std::lock_guard l(mu_);
      if (auto it = lanes_.find(shard); it != lanes_.end()) lane = it->second;
    }
    return lane && lane->open() && lane->push(ticket, std::move(payload));
  }

  std::size_t unsent(std::uint32_t shard) const override {
    std::lock_guard l(mu_);
    auto it = lanes_.find(shard);
    return it == lanes_.end() ? 0 : it->second->unsent();
  }

 private:
  // One connection of the lane, welcomed, or why not.
  expected<lane_stream> connect(const std::string& host, const lane_offer& offer, direction way,
                                steady::time_point deadline) {
    auto s = lane_stream::dial(host, offer.port, o_.tls, o_.dialled_role, deadline);
    if (!s) return s.error();
    const auto hello = encode_header(hello_header(way));
    if (auto e = s->write(hello.data(), hello.size(), {deadline, {}})) return failure{"hello: " + *e};
    if (auto e = s->write(offer.token.data(), offer.token.size(), {deadline, {}})) return failure{"hello: " + *e};
    header_bytes_t raw{};
    if (auto e = s->read(raw.data(), raw.size(), {deadline, {}}))
      return failure{"the shard did not welcome the connection: " + *e};
    auto h = decode_header(raw, 0);
    if (!h || h->kind != frame_kind::welcome)
      return failure{"the shard answered the hello with " + (h ? std::string("another frame") : h.error().message)};
    if (auto e = s->seal(true)) return failure{*e};
    return s;
  }

  void run(const std::shared_ptr<lane_pair>& lane, const std::string& host, const lane_offer& offer) {
    const std::uint32_t shard = lane->peer();
    if (offer.token.size() != token_bytes) return closed(lane, "the shard's offer holds no valid token");
    const auto deadline = steady::now() + o_.handshake_timeout;
    auto out = connect(host, offer, direction::to_shard, deadline);
    if (!out) return closed(lane, "cannot open the lane to " + host + ": " + out.error().message);
    auto in = std::make_shared<lane_stream>();
    if (auto got = connect(host, offer, direction::to_member, deadline); got)
      *in = std::move(*got);
    else
      return closed(lane, "cannot open the lane to " + host + ": " + got.error().message);
    const int out_fd = out->fd(), in_fd = in->fd();
    if (!lane->attach(out_fd) || !lane->attach(in_fd)) return;  // closed meanwhile
    lane->set_open();
    if (h_.opened) h_.opened(shard);
    threads_.spawn([this, lane, in, in_fd, shard] {
      auto why = read_payloads(*in, o_.idle_timeout, false, [&](std::uint64_t ticket, arrival a) {
        if (h_.payload) h_.payload(shard, ticket, std::move(a.data));
      });
      lane->detach(in_fd);
      closed(lane, why.value_or("closed"));
    });
    auto why = write_payloads(*out, *lane, o_.idle_timeout);
    lane->detach(out_fd);
    closed(lane, why.value_or("closed"));
  }

  void closed(const std::shared_ptr<lane_pair>& lane, const std::string& why) {
    if (!lane->close()) return;
    {
      std::lock_guard l(mu_);
      auto it = lanes_.find(lane->peer());
      if (it == lanes_.end() || it->second != lane) return;  // replaced by a newer one
      lanes_.erase(it);
    }
    if (h_.closed) h_.closed(lane->peer(), why);
  }

  const transport_options o_;
  mutable std::mutex mu_;
  handlers h_;
  std::map<std::uint32_t, std::shared_ptr<lane_pair>> lanes_;  // by shard
  thread_set threads_;
};

}  // namespace

std::shared_ptr<member_end> dial_shards(transport_options o) { return std::make_shared<dialler>(std::move(o)); }

}  // namespace troupe::lane
