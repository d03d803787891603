// ring_link: what goes through a ring member's same-host mailboxes, and what waits.
#include "core/ring_link.hpp"

#include <utility>

namespace troupe {

expected<std::string> ring_link::make_outbox(std::string_view tag, std::size_t bytes, std::uint64_t label) {
  auto out = shm::ring_outbox::create(tag, bytes, label);
  if (!out) return out.error();
  out_.emplace(std::move(*out));
  return out_->name();
}

ring_link::answer ring_link::take_answer(const std::string& segment, bool accepted) {
  if (!out_ || segment != out_->name() || out_->usable() || out_->closed()) return answer::ignored;
  if (!accepted) {
    out_.reset();
    return answer::refused;
  }
  out_->accepted();
  return answer::accepted;
}

tensor ring_link::piece_buffer(std::int64_t numel) {
  return out_ && out_->usable() && waiting_.empty() && numel >= min_mailbox_numel ? out_->lend(numel) : tensor{};
}

bool ring_link::into_outbox(ring_piece& p) {
  if (p.values.empty()) return true;
  const bool lent = out_->holds(p.values.bytes());
  auto where = lent ? out_->seal(p.values) : out_->put(p.values);
  if (!where) return false;
  p.shared = std::move(*where);
  p.values = tensor{};
  return true;
}

void ring_link::out_of_outbox(ring_piece& p) {
  if (!out_ || p.values.empty() || !out_->holds(p.values.bytes())) return;
  out_->abandon(p.values.bytes());
  p.values = tensor(p.values);
}

bool ring_link::pass(ring_piece p, const sender& send) {
  if (!out_ || !out_->usable()) {
    out_of_outbox(p);
    if (waiting_.empty()) {
      send(p);
      return false;
    }
  } else if (waiting_.empty() && (small(p) || into_outbox(p))) {
    send(p);
    return false;
  } else {
    out_of_outbox(p);  // pieces before it wait: it may not overtake them, so it waits too, out of the outbox
  }
  waiting_.push_back(std::move(p));
  return true;
}

bool ring_link::drain(const sender& send) {
  while (!waiting_.empty()) {
    ring_piece& p = waiting_.front();
    if (out_ && out_->usable() && !small(p) && !into_outbox(p)) break;
    send(p);
    waiting_.pop_front();
  }
  return !waiting_.empty();
}

std::optional<std::string> ring_link::take_offer(const std::string& segment, std::string_view tag,
                                                 std::uint64_t prev_label) {
  if (tag.empty()) return "the same-host fast path is off here";
  if (in_) return "it maps a mailbox of that member already";
  auto in = shm::ring_inbox::open(segment, tag, prev_label);
  if (!in) return in.error().message;
  in_.emplace(std::move(*in));
  return std::nullopt;
}

std::optional<std::string> ring_link::fill(ring_piece& p) {
  if (p.shared.empty()) return std::nullopt;
  if (!p.values.empty()) return "carries its values both in the message and in a mailbox";
  if (!in_) return "lies in a mailbox this member never mapped";
  auto t = in_->take(p.shared);
  if (!t) return t.error().message;
  p.values = std::move(*t);
  p.shared = {};
  return std::nullopt;
}

}  // namespace troupe
