// lane_io: the payload loops of a welcomed lane connection and the lane's shared state.
#include "transport/lane_io.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <csignal>

#include "tensor/ops.hpp"
#include "transport/frame_bound.hpp"
#include "transport/lane_frame.hpp"
#include "transport/lane_seal.hpp"

namespace troupe::lane {

bool lane_pair::push(std::uint64_t ticket, tensor&& t) {
  {
    std::lock_guard l(mu_);
    if (closed_) return false;
    queue_.emplace_back(ticket, std::move(t));
    ++unsent_;
  }
  cv_.notify_one();
  return true;
}

std::optional<std::pair<std::uint64_t, tensor>> lane_pair::next() {
  std::unique_lock l(mu_);
  cv_.wait(l, [&] { return closed_ || !queue_.empty(); });
  if (closed_) return std::nullopt;
  auto item = std::move(queue_.front());
  queue_.pop_front();
  return item;
}

void lane_pair::written() {
  std::lock_guard l(mu_);
  if (unsent_ > 0) --unsent_;
}

bool lane_pair::attach(int fd) {
  std::lock_guard l(mu_);
  if (closed_) return false;
  fds_.push_back(fd);
  return true;
}

void lane_pair::detach(int fd) {
  std::lock_guard l(mu_);
  fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
}

bool lane_pair::close() {
  std::deque<std::pair<std::uint64_t, tensor>> dropped;  // released outside the lock
  {
    std::lock_guard l(mu_);
    if (closed_) return false;
    closed_ = true;
    open_ = false;
    unsent_ = 0;
    dropped.swap(queue_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  return true;
}

std::optional<std::string> write_payloads(lane_stream& s, lane_pair& lane, std::chrono::milliseconds idle) {
  while (auto item = lane.next()) {
    const tensor& t = item->second;
    const auto header = encode_header(payload_header(item->first, t.type(), t.nbytes()));
    if (auto e = s.write(header.data(), header.size(), {{}, idle})) return e;
    if (auto e = s.write(t.bytes(), t.nbytes(), {{}, idle})) return e;
    lane.written();
  }
  return std::nullopt;
}

std::optional<std::string> read_payloads(lane_stream& s, std::chrono::milliseconds idle, bool scan_finite,
                                         const std::function<void(std::uint64_t, arrival)>& got) {
  // A scanned payload is read a sealed unit at a time, so each chunk is scanned while it is
  // in cache and the reads stay aligned with the writer's units (Note [Sealed lane frames]).
  constexpr std::size_t scan_chunk = seal_unit;
  for (;;) {
    header_bytes_t raw{};
    if (auto e = s.read(raw.data(), raw.size(), forever)) return e;  // a lane may be idle for long
    auto h = decode_header(raw, frame_bound());
    if (!h) return h.error().message;
    if (h->kind != frame_kind::payload) return std::string("a lane frame that is not a payload after the welcome");
    arrival a{tensor::uninitialized({static_cast<std::int64_t>(h->nbytes / size_of(h->type))}, h->type), false};
    if (!scan_finite || h->type != dtype::f32) {
      if (auto e = s.read(a.data.bytes(), a.data.nbytes(), {{}, idle})) return "in a payload: " + *e;
    } else {
      a.finite = true;
      for (std::size_t at = 0, n = a.data.nbytes(); at < n; at += scan_chunk) {
        const std::size_t len = std::min(scan_chunk, n - at);
        if (auto e = s.read(a.data.bytes() + at, len, {{}, idle})) return "in a payload: " + *e;
        if (a.finite)
          a.finite = all_finite(a.data.view().flat(static_cast<std::int64_t>(at / sizeof(float)),
                                                   static_cast<std::int64_t>(len / sizeof(float))));
      }
    }
    got(h->ticket, std::move(a));
  }
}

void thread_set::spawn(std::function<void()> fn) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard l(mu_);
  reap();
  threads_.push_back({std::thread([fn = std::move(fn), done] {
                        fn();
                        done->store(true);
                      }),
                      done});
}

void thread_set::reap() {
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
}

void thread_set::join_all() {
  std::list<entry> all;
  {
    std::lock_guard l(mu_);
    all.swap(threads_);
  }
  for (auto& e : all)
    if (e.thread.joinable()) e.thread.join();
}

void ignore_sigpipe() {
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace troupe::lane
