// Lane ends for tests of the bulk lanes' transport (tests/net/test_lane_transport.cpp): a
// shard's listening end and a member's dialling end whose handlers fill inboxes that a
// test waits on with a deadline, a job's CA and certificates, the transport options
// (plain or mutual TLS), and patterned tensors to compare bit for bit.
#pragma once

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tests/support/temp_dir.hpp"
#include "transport/lane_transport.hpp"
#include "transport/tls.hpp"

namespace troupe::test {

using namespace std::chrono_literals;
using namespace troupe::lane;

// What a lane end's handlers saw, waited for with a deadline.
template <class T>
class inbox {
 public:
  void put(T x) {
    {
      std::lock_guard l(mu_);
      q_.push_back(std::move(x));
    }
    cv_.notify_all();
  }
  std::optional<T> take(std::chrono::milliseconds within = 10s) {
    std::unique_lock l(mu_);
    if (!cv_.wait_for(l, within, [&] { return !q_.empty(); })) return std::nullopt;
    T x = std::move(q_.front());
    q_.pop_front();
    return x;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
};

struct delivery {
  std::uint32_t peer = 0;
  std::uint64_t ticket = 0;
  tensor data;
  bool finite = false;  // as the reader said (a shard's end scans f32 payloads)
};
struct closing {
  std::uint32_t peer = 0;
  std::string why;
};

// The end is declared last, so it goes (joining its threads) before the inboxes its
// handlers fill.
struct shard_side {
  inbox<delivery> payloads;
  inbox<closing> closed;
  std::shared_ptr<listening_end> end;

  explicit shard_side(transport_options o) {
    auto made = listen_for_members("127.0.0.1", 0, std::move(o));
    BOOST_REQUIRE_MESSAGE(made.has_value(), (made ? "" : made.error().message));
    end = *made;
    end->start({[this](std::uint32_t r, std::uint64_t t, arrival a) { payloads.put({r, t, std::move(a.data), a.finite}); },
                [this](std::uint32_t r, const std::string& why) { closed.put({r, why}); }});
  }
};

struct member_side {
  inbox<std::uint32_t> opened;
  inbox<delivery> payloads;
  inbox<closing> closed;
  std::shared_ptr<member_end> end;

  explicit member_side(transport_options o) : end(dial_shards(std::move(o))) {
    end->start({[this](std::uint32_t s) { opened.put(s); },
                [this](std::uint32_t s, std::uint64_t t, tensor x) { payloads.put({s, t, std::move(x)}); },
                [this](std::uint32_t s, const std::string& why) { closed.put({s, why}); }});
  }
};

tensor pattern(std::int64_t n, std::uint32_t seed) {
  tensor t = tensor::uninitialized({n});
  std::uint32_t x = seed;
  for (std::int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(x >> 8) * 1e-6f;
  }
  return t;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

// A job's CA and certificates for a shard ("server-0"), a member ("worker-0"), and a
// member that holds a server's certificate ("server-1").
struct pki {
  test::temp_dir dir{"lane-pki"};
  pki() {
    BOOST_REQUIRE(create_ca(dir.path.string(), "lane test CA", std::chrono::hours(1)).has_value());
    for (const char* name : {"server-0", "worker-0", "server-1"})
      BOOST_REQUIRE(issue_node_certificate(dir.path.string(), name, {"IP:127.0.0.1"}, -60s, 3600s).has_value());
  }
  tls_context context(const std::string& name) const {
    const std::string pem = dir.file(name + ".pem");
    auto c = tls_context_for({pem, pem, dir.file("ca.pem"), {}});
    BOOST_REQUIRE_MESSAGE(c.has_value(), (c ? "" : c.error().message));
    return *c;
  }
};

transport_options plain() {
  transport_options o;
  o.handshake_timeout = 2s;
  o.idle_timeout = 2s;
  return o;
}

transport_options secured(const pki& p, const std::string& name) {
  transport_options o = plain();
  o.tls = p.context(name);
  return o;
}

}  // namespace troupe::test
