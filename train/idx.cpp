// IDX parsing on top of zlib's gzFile (which also reads uncompressed files).
#include "train/idx.hpp"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <memory>

namespace troupe {

namespace {

struct gz_closer {
  void operator()(gzFile f) const { gzclose(f); }
};
using gz_ptr = std::unique_ptr<std::remove_pointer_t<gzFile>, gz_closer>;

// Upper bound on the elements one file may declare: far above any dataset that fits in
// memory here, low enough that a corrupt header cannot make us allocate terabytes.
constexpr std::int64_t max_idx_elements = std::int64_t{1} << 34;

// Reads exactly n bytes; returns how many were read, or -1 with `err` set on a zlib error.
std::int64_t read_fully(gzFile f, void* dst, std::int64_t n, std::string& err) {
  auto* out = static_cast<unsigned char*>(dst);
  std::int64_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::int64_t>(n - done, 1 << 30));
    const int got = gzread(f, out + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      err = msg ? msg : "read error";
      return -1;
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

}  // namespace

expected<idx_array> read_idx(const std::string& path, int expected_rank) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return failure{path + ": no such file"};
  gz_ptr f(gzopen(path.c_str(), "rb"));
  if (!f) return failure{path + ": cannot open (" + std::strerror(errno) + ")"};
  std::string err;
  unsigned char magic[4];
  const std::int64_t got = read_fully(f.get(), magic, 4, err);
  if (got < 0) return failure{path + ": corrupt compressed data (" + err + ")"};
  if (got < 4) return failure{path + ": truncated: the file is shorter than an IDX header"};
  if (magic[0] != 0 || magic[1] != 0)
    return failure{path + ": not an IDX file (bad magic number); is it the right file, and not corrupted?"};
  if (magic[2] != 0x08)
    return failure{path + ": IDX element type 0x" + std::to_string(magic[2]) +
                   " is not supported; only unsigned bytes (0x08) are"};
  if (magic[3] != expected_rank)
    return failure{path + ": expected a rank-" + std::to_string(expected_rank) + " IDX array, found rank " +
                   std::to_string(magic[3]) + "; are images and labels swapped?"};
  idx_array out;
  std::int64_t total = 1;
  for (int i = 0; i < expected_rank; ++i) {
    unsigned char b[4];
    const std::int64_t n = read_fully(f.get(), b, 4, err);
    if (n < 0) return failure{path + ": corrupt compressed data (" + err + ")"};
    if (n < 4) return failure{path + ": truncated inside the IDX header"};
    const std::int64_t d = (std::int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    if (d <= 0) return failure{path + ": IDX dimension " + std::to_string(i) + " is zero"};
    out.dims.push_back(d);
    total *= d;
    if (total > max_idx_elements) return failure{path + ": IDX header declares an implausibly large array"};
  }
  out.data.resize(static_cast<std::size_t>(total));
  const std::int64_t n = read_fully(f.get(), out.data.data(), total, err);
  if (n < 0) return failure{path + ": corrupt compressed data (" + err + ")"};
  if (n < total)
    return failure{path + ": truncated: the header declares " + std::to_string(total) + " bytes of data, the file has " +
                   std::to_string(n) + "; download or reinstall it"};
  unsigned char extra;
  const std::int64_t more = read_fully(f.get(), &extra, 1, err);
  if (more < 0) return failure{path + ": corrupt compressed data (" + err + ")"};
  if (more > 0) return failure{path + ": has bytes after the data the header declares; the file is corrupt"};
  return out;
}

}  // namespace troupe
