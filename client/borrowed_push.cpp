// borrowed_push: Note [Borrowed pushes] in client/borrowed_push.hpp.
#include "client/borrowed_push.hpp"

namespace troupe::kv {

void borrow_ledger::lent() {
  std::lock_guard lock(mu_);
  ++outstanding_;
}

void borrow_ledger::returned() {
  std::lock_guard lock(mu_);
  if (--outstanding_ == 0) cv_.notify_all();
}

bool borrow_ledger::wait_all_returned(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, d, [this] { return outstanding_ == 0; });
}

tensor borrowed_push::lend(const std::shared_ptr<borrowed_push>& self, const float* data, std::int64_t n) {
  if (self->ledger_) self->ledger_->lent();
  auto* keep = new std::shared_ptr<borrowed_push>(self);
  const buffer_release on_release{[](void* ctx, std::byte*) {
                                    auto* held = static_cast<std::shared_ptr<borrowed_push>*>(ctx);
                                    if ((*held)->memory_) (*held)->memory_->leave();
                                    if ((*held)->ledger_) (*held)->ledger_->returned();
                                    (*held)->settle(std::nullopt);
                                    delete held;
                                  },
                                  keep};
  // const_cast: the message's tensor is only read (serialized) before its release.
  auto* bytes = reinterpret_cast<std::byte*>(const_cast<float*>(data));
  return tensor::adopt(bytes, on_release, {n}, dtype::f32, cpu_device);
}

void borrowed_push::answered(std::optional<fault> f, std::vector<part_result> r) {
  settle(std::make_pair(std::move(f), std::move(r)));
}

void borrowed_push::settle(std::optional<answer> a) {
  std::unique_lock lock(mu_);
  if (a) answer_ = std::move(a);
  if (++events_ < 2) return;
  auto [f, r] = std::move(*answer_);
  lock.unlock();
  done_(std::move(f), std::move(r));
}

const float* contiguous_floats(const std::vector<push_part>& parts) {
  for (std::size_t i = 1; i < parts.size(); ++i)
    if (parts[i - 1].data + parts[i - 1].numel != parts[i].data) return nullptr;
  return parts.empty() ? nullptr : parts[0].data;
}

}  // namespace troupe::kv
