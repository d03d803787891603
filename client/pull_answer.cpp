// pull_answer: a shard's answer to a key-value pull, checked, then copied or decoded into
// the caller's arrays (see the header).
#include "client/pull_answer.hpp"

#include <spdlog/spdlog.h>

#include <string>

namespace troupe::kv {

namespace {

// What was wrong with an answer that does not fit the pull.
fault mismatch(const std::string& who, const tensor& from, std::size_t versions, std::size_t parts, std::int64_t total,
               const std::string& expected) {
  return fault{errc::malformed, who + " answered a pull of " + std::to_string(parts) + " parts (" +
                                    std::to_string(total) + " " + expected + " values) with " +
                                    std::to_string(from.empty() ? 0 : from.numel()) + " " +
                                    std::string(name_of(from.type())) +
                                    " values and " + std::to_string(versions) + " versions"};
}

// A pull's answer in the job's --pull-precision (fp16 or bf16), decoded straight into the
// caller's arrays once its size and dtype are checked, so a malformed one writes nothing.
or_fault<std::vector<part_result>> unpack_encoded(const tensor& from, const std::vector<std::int64_t>& versions,
                                                  const std::vector<pull_part>& parts, std::int64_t total,
                                                  const grad_codec& precision, const std::string& who) {
  const dtype want = precision.kind == codec_kind::fp16 ? dtype::f16 : dtype::bf16;
  if (from.rank() != 1 || from.type() != want || from.numel() != total || versions.size() != parts.size())
    return mismatch(who, from, versions.size(), parts.size(), total, std::string(name_of(want)));
  std::vector<part_result> out;
  const std::byte* at = from.bytes();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const const_tensor_view piece(at, want, {parts[i].numel});
    if (auto e = decode_into(precision, piece, floats(parts[i].out, parts[i].numel)))
      return fault{errc::malformed, who + " answered a pull with " + *e};
    at += piece.nbytes();
    out.push_back({parts[i].part, versions[i], 0});
  }
  return out;
}

}  // namespace

or_fault<std::vector<part_result>> unpack_pull(kv_pull_reply& reply, const std::vector<pull_part>& parts,
                                               std::int64_t total, shard_call& call, const grad_codec& precision,
                                               pulled_views* views) {
  const std::uint32_t shard = call.shard();
  const std::string who = "shard " + std::to_string(shard);
  tensor from = std::move(reply.data);
  if (!reply.shared.empty()) {
    auto t = call.take_reply(reply.shared);
    if (!t) return fault{errc::malformed, t.error().message};
    if (t->first) spdlog::info("troupe.kv: exchanges tensors with shard {} through shared memory", shard);
    from = std::move(t->values);
  } else if (views && from.type() == dtype::u8) {  // Note [2-bit key-value pulls]
    if (reply.versions.size() != parts.size())
      return mismatch(who, from, reply.versions.size(), parts.size(), total, "2-bit");
    if (auto wrong = views->apply_codes(parts, from)) return fault{errc::malformed, who + " answered a pull with " + *wrong};
    std::vector<part_result> out;
    for (std::size_t i = 0; i < parts.size(); ++i) out.push_back({parts[i].part, reply.versions[i], 0});
    return out;
  } else if (from.type() != dtype::f32 && precision.kind != codec_kind::none) {
    return unpack_encoded(from, reply.versions, parts, total, precision, who);
  }
  if (from.empty() || from.numel() != total || from.type() != dtype::f32 || reply.versions.size() != parts.size())
    return mismatch(who, from, reply.versions.size(), parts.size(), total, "f32");
  if (views) views->take_values(parts, from.view());
  std::vector<part_result> out;
  std::int64_t pos = 0;
  const const_tensor_view src = from.view();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    copy(floats(parts[i].out, parts[i].numel), src.flat(pos, parts[i].numel));
    pos += parts[i].numel;
    out.push_back({parts[i].part, reply.versions[i], 0});
  }
  return out;
}

}  // namespace troupe::kv
