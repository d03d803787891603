// push_compressor: a key-value member's compression of the pushes it sends over the
// network, with the 2-bit error-feedback residual it keeps per part.
//
// Note [Compressed key-value pushes]
// With the job's --compression a push that goes over the network (the same-host fast
// path moves f32) carries its parts encoded one by one and concatenated: f16 or bf16
// elements, or per part a 2-bit block with its own scale (Note [2-bit gradients] in
// tensor/grad_codec.hpp) whose error-feedback residual this member keeps per part, so
// what one push leaves out of a key reaches the shard with that key's next push. The
// shard decodes part by part and, if any part does not decode, refuses the whole push
// before applying any of it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "client/kv_transport.hpp"
#include "tensor/grad_codec.hpp"

namespace troupe::kv {

class push_compressor {
 public:
  // codec: the job's --compression, not none.
  explicit push_compressor(grad_codec codec);

  // The parts' floats, encoded one by one and concatenated (u8 for 2-bit, else f16 or
  // bf16). Pushes from several threads may call it at once; each part's residual is
  // locked while it is used.
  tensor encode_parts(const std::vector<push_part>& parts);

 private:
  // A part's 2-bit residual (zeros at first).
  struct residual {
    std::mutex mu;
    tensor value;
  };
  residual& residual_of(kv_part_id part, std::int64_t numel);

  grad_codec codec_;
  std::mutex mu_;
  std::map<kv_part_id, std::unique_ptr<residual>> residuals_;
};

}  // namespace troupe::kv
