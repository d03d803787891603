// job_secret: creating and loading the secret file, and the HMAC of Note [Join proofs].
#include "net/job_secret.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <fstream>
#include <sstream>

namespace troupe {

namespace {

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

}  // namespace

expected<std::string> create_job_secret(const std::string& path) {
  unsigned char raw[job_secret_hex_digits / 2];
  if (RAND_bytes(raw, sizeof raw) != 1) return failure{"cannot draw random bytes for the job's secret"};
  const std::string secret = hex(raw, sizeof raw);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return failure{"cannot create the job's secret " + path + ": " + std::strerror(errno)};
  const std::string line = secret + "\n";
  const bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && fsync(fd) == 0;
  close(fd);
  if (!ok) return failure{"cannot write the job's secret " + path};
  return secret;
}

expected<std::string> load_job_secret(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0)
    return failure{"--secret-file: cannot read " + path + ": " + std::strerror(errno) +
                   " (troupe launch and troupe tls init write the job's secret as job.secret)"};
  if (st.st_uid != geteuid()) return failure{"--secret-file: " + path + " belongs to another user"};
  if ((st.st_mode & 077) != 0)
    return failure{"--secret-file: " + path + " is readable by other users; chmod 600 it (and make a new secret if "
                   "anyone may have read it)"};
  std::ifstream in(path);
  std::string secret;
  std::getline(in, secret);
  if (secret.size() != job_secret_hex_digits || secret.find_first_not_of("0123456789abcdef") != std::string::npos)
    return failure{"--secret-file: " + path + " does not hold a job secret (64 lowercase hex digits)"};
  return secret;
}

namespace {

// HMAC-SHA256(secret, label | fields...), each NUL-terminated, as hex.
std::string mac_of(std::string_view secret, std::string_view label, std::initializer_list<std::string_view> fields) {
  std::string message(label);
  message += '\0';
  for (std::string_view field : fields) {
    message += field;
    message += '\0';
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), mac, &len);
  return hex(mac, len);
}

}  // namespace

std::string join_proof(std::string_view secret, std::string_view job_id, std::string_view role,
                       std::string_view joining_node, std::string_view coordinator_node) {
  return mac_of(secret, "troupe-join-v1", {job_id, role, joining_node, coordinator_node});
}

std::string shared_memory_tag(std::string_view secret, std::string_view job_id) {
  return mac_of(secret, "troupe-shm-v1", {job_id}).substr(0, 16);
}

bool proofs_match(std::string_view expected_proof, std::string_view given) {
  return expected_proof.size() == given.size() && !expected_proof.empty() &&
         CRYPTO_memcmp(expected_proof.data(), given.data(), given.size()) == 0;
}

}  // namespace troupe
