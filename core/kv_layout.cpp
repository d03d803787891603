// kv_registry: key names, row-wise splitting and shard placement (Note [Keys and parts]).
#include "core/kv_layout.hpp"

#include <algorithm>

namespace troupe {

std::string kv_key_name(std::int64_t key) { return "i:" + std::to_string(key); }
std::string kv_key_name(std::string_view key) { return "s:" + std::string(key); }

std::string kv_key_display(std::string_view canonical) {
  if (canonical.substr(0, 2) == "i:") return std::string(canonical.substr(2));
  if (canonical.substr(0, 2) == "s:") {
    std::string quoted(1, '"');
    quoted.append(canonical.substr(2)).push_back('"');
    return quoted;
  }
  return std::string(canonical);
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr std::uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[extra] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += extra + 1;
  }
  return true;
}

std::string dims_str(const std::vector<std::int64_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

std::int64_t kv_key_layout::rows() const { return dims.empty() ? 1 : dims[0]; }

std::int64_t kv_key_layout::row_numel() const {
  std::int64_t n = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

std::int64_t kv_key_layout::numel() const { return rows() * row_numel(); }

kv_registry::kv_registry(std::uint32_t shards, std::int64_t bound)
    : bound_(bound > 0 ? std::min(bound, kv_max_message_floats) : 1000000), shard_numel_(std::max<std::uint32_t>(shards, 1), 0) {}

const kv_key_layout* kv_registry::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &keys_[it->second];
}

const kv_key_layout* kv_registry::find(std::uint32_t id) const {
  return id < keys_.size() && !keys_[id].name.empty() ? &keys_[id] : nullptr;
}

std::vector<kv_key_layout> kv_registry::keys() const {
  std::vector<kv_key_layout> out;
  for (const auto& k : keys_)
    if (!k.name.empty()) out.push_back(k);
  return out;
}

expected<kv_registry> kv_registry::restore(std::uint32_t shards, std::int64_t bound, std::vector<kv_key_layout> keys) {
  kv_registry r(shards, bound);
  for (auto& k : keys) {
    const std::string shown = "key " + kv_key_display(k.name);
    if (k.name.empty() || r.by_name_.count(k.name) || (k.id < r.keys_.size() && !r.keys_[k.id].name.empty()))
      return failure{shown + " (id " + std::to_string(k.id) + ") is named twice or has no name"};
    for (const auto& p : k.parts) {
      if (p.shard >= r.shard_numel_.size())
        return failure{shown + " has a part on shard " + std::to_string(p.shard) + ", but the job has " +
                       std::to_string(r.shard_numel_.size()) + " shards"};
      r.shard_numel_[p.shard] += p.numel;
    }
    if (r.keys_.size() <= k.id) r.keys_.resize(k.id + 1);
    r.by_name_[k.name] = k.id;
    r.keys_[k.id] = std::move(k);
  }
  return r;
}

kv_registry::init_outcome kv_registry::init(const std::string& name, const std::vector<std::int64_t>& dims) {
  init_outcome out;
  if (name.size() < 2 || (name.substr(0, 2) != "i:" && name.substr(0, 2) != "s:") ||
      !valid_utf8(std::string_view(name).substr(2))) {
    out.error = fault{errc::bad_job, "key " + kv_key_display(name) + " is not an integer or a valid UTF-8 string"};
    return out;
  }
  for (auto d : dims)
    if (d <= 0) {
      out.error = fault{errc::bad_shape, "key " + kv_key_display(name) + " has shape " + dims_str(dims) +
                                             "; every dimension must be at least 1"};
      return out;
    }
  if (const kv_key_layout* k = find(name)) {
    out.layout = k;
    if (k->dims != dims)
      out.error = fault{errc::bad_shape, "key " + kv_key_display(name) + " was initialised with shape " +
                                             dims_str(k->dims) + ", not " + dims_str(dims)};
    return out;
  }
  kv_key_layout k;
  k.id = static_cast<std::uint32_t>(keys_.size());
  k.name = name;
  k.dims = dims;
  const std::int64_t row = k.row_numel();
  if (row > kv_max_message_floats) {
    out.error = fault{errc::bad_shape, "key " + kv_key_display(name) + " of shape " + dims_str(dims) + " has rows of " +
                                           std::to_string(row) + " elements; a row may hold at most " +
                                           std::to_string(kv_max_message_floats) + " (reshape it to more rows)"};
    return out;
  }
  const std::int64_t rows_per_part = std::max<std::int64_t>(1, bound_ / row);
  const std::int64_t parts = (k.rows() + rows_per_part - 1) / rows_per_part;
  if (parts > kv_max_parts) {
    out.error = fault{errc::bad_shape, "key " + kv_key_display(name) + " of shape " + dims_str(dims) + " would need " +
                                           std::to_string(parts) + " parts of at most " +
                                           std::to_string(bound_) + " elements; raise the big-array bound"};
    return out;
  }
  for (std::int64_t p = 0, begin = 0; begin < k.rows(); ++p, begin += rows_per_part) {
    kv_part part;
    part.id = make_part_id(k.id, static_cast<std::uint32_t>(p));
    part.row_begin = begin;
    part.rows = std::min(rows_per_part, k.rows() - begin);
    part.numel = part.rows * row;
    part.shard = static_cast<std::uint32_t>(
        std::min_element(shard_numel_.begin(), shard_numel_.end()) - shard_numel_.begin());
    shard_numel_[part.shard] += part.numel;
    k.parts.push_back(part);
  }
  by_name_[name] = k.id;
  keys_.push_back(std::move(k));
  out.layout = &keys_.back();
  out.created = true;
  return out;
}

}  // namespace troupe
