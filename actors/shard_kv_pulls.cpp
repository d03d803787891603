// shard_kv_pulls: a user's loop's pulls on a shard server (served and held by
// shard_pulls.cpp): checked, and answered in the slot the member offered, on its bulk
// lane, or in the message, in the job's --pull-precision (2-bit against the member's
// views, Note [2-bit key-value pulls] in client/pulled_views.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "actors/shard_state.hpp"
#include "tensor/grad_codec.hpp"

namespace troupe::shard_shell {

namespace {

// Writes the parts a key-value pull asks for, concatenated, into `out`.
void pack_kv_answer(const shard_core& kv, const kv_pull& r, tensor_view out) {
  std::int64_t pos = 0;
  for (std::size_t i = 0; i < r.parts.size(); ++i) {
    const const_tensor_view v = kv.value(r.parts[i]);
    const std::int64_t n = r.rows[i].empty() ? v.numel() : static_cast<std::int64_t>(r.rows[i].size()) * r.row_numel[i];
    if (r.rows[i].empty())
      copy(out.flat(pos, n), v);
    else
      kv.gather_rows(r.parts[i], r.rows[i], r.row_numel[i], out.flat(pos, n));
    pos += n;
  }
}

// --pull-precision 2bit (Note [2-bit key-value pulls] in client/pulled_views.hpp): the
// pull's answer in 2-bit codes of each part's change since the member's view, concatenated,
// when every part is whole and has a view and the member did not ask for f32; else the
// values packed in f32, which become the whole parts' views.
tensor two_bit_answer(shard_pointer self, const kv_pull& r, std::int64_t total) {
  auto& st = self->state;
  const shard_core& kv = *st.core;
  bool codes = !r.full;
  for (std::size_t i = 0; codes && i < r.parts.size(); ++i) {
    const tensor* view = st.views->view(r.worker, r.parts[i]);
    codes = r.rows[i].empty() && view && view->numel() == kv.value(r.parts[i]).numel();
  }
  if (!codes) {
    tensor values = tensor::uninitialized({total});
    pack_kv_answer(kv, r, values.view());
    for (std::size_t i = 0; i < r.parts.size(); ++i)
      if (r.rows[i].empty()) st.views->answer(r.worker, kv.lend_value(r.parts[i]), true, r.parts[i]);
    return values;
  }
  std::vector<tensor> wires;
  std::int64_t bytes = 0;
  for (auto part : r.parts) {
    wires.push_back(st.views->answer(r.worker, kv.lend_value(part), false, part));
    bytes += static_cast<std::int64_t>(wires.back().nbytes());
  }
  tensor out = tensor::uninitialized({bytes}, dtype::u8);
  std::byte* at = out.bytes();
  for (const auto& w : wires) at = std::copy(w.bytes(), w.bytes() + w.nbytes(), at);
  return out;
}

}  // namespace

// The reply to a key-value pull whose parts are all answerable now: in the slot it offered
// when the fast path can take it (Note [Same-host fast path]), as f32; otherwise in the
// job's --pull-precision, on the member's bulk lane when it asked and has one (Note [Bulk
// lanes]), else in the message. With --async-rule dcasgd a whole part answered is what
// the member's next gradient of it is compensated against (Note [Delay compensation]).
kv_pull_reply kv_answer(shard_pointer self, const kv_pull& r) {
  auto& st = self->state;
  const shard_core& kv = *st.core;
  std::int64_t total = 0;
  kv_pull_reply out{st.index, {}, tensor(), {}};
  for (std::size_t i = 0; i < r.parts.size(); ++i) {
    total +=
        r.rows[i].empty() ? kv.value(r.parts[i]).numel() : static_cast<std::int64_t>(r.rows[i].size()) * r.row_numel[i];
    out.versions.push_back(kv.version(r.parts[i]));
    if (r.rows[i].empty()) st.core->answered(r.worker, r.parts[i]);
  }
  if (st.channels && !r.reply_to.empty()) {
    std::string refused;
    auto fill = [&](tensor_view slot) { pack_kv_answer(kv, r, slot); };
    if (auto where = st.channels->answer_with(r.worker, r.reply_to, {total}, fill, refused)) {
      if (st.m) st.m->bytes_sent->Increment(static_cast<double>(total * 4));
      if (st.views)  // the member holds the f32 values now
        for (auto part : r.parts) st.views->forget(r.worker, part);
      watch_bell(self, r.worker, r.reply_to);  // the member may ring there now (Note [Doorbells])
      out.shared = std::move(*where);
      return out;
    }
    if (!refused.empty()) spdlog::info("shard {}: answers worker {} over the network: {}", st.index, r.worker, refused);
  }
  if (st.views) {
    out.data = two_bit_answer(self, r, total);
  } else if (r.parts.size() == 1 && r.rows[0].empty() && st.pull_precision.kind == codec_kind::none) {
    out.data = kv.lend_value(r.parts[0]);  // one whole part as it lies: Note [Lent values]
  } else {
    out.data = tensor::uninitialized({total});
    pack_kv_answer(kv, r, out.data.view());
    if (st.pull_precision.kind != codec_kind::none) out.data = encode(st.pull_precision, out.data);
  }
  if (st.m) st.m->bytes_sent->Increment(static_cast<double>(out.data.nbytes()));
  if (auto d = answer_on_lane(self, r.worker, r.lane_reply, out.data)) out.lane = std::move(*d);
  return out;
}

std::optional<fault> check_kv_pull(const shard_core& kv, const kv_pull& r) {
  if (auto e = check_kv_parts(kv, r.parts)) return e;
  if (r.rows.size() != r.parts.size() || r.row_numel.size() != r.parts.size())
    return fault{errc::malformed, "a pull whose rows do not match its parts"};
  for (std::size_t i = 0; i < r.parts.size(); ++i)
    for (auto row : r.rows[i])
      if (row < 0 || r.row_numel[i] <= 0 || (row + 1) * r.row_numel[i] > kv.value(r.parts[i]).numel())
        return fault{errc::bad_shape, "a pull asks for row " + std::to_string(row) + ", outside its part of the key"};
  return std::nullopt;
}

}  // namespace troupe::shard_shell
