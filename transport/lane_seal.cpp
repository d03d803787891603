// lane_seal: AES-256-GCM units with counter nonces, keyed from a TLS session's exporter.
#include "transport/lane_seal.hpp"

#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <cstring>

#include "transport/tls.hpp"

namespace troupe::lane {

namespace {

constexpr const char* dialler_label = "EXPORTER-troupe-lane-dialler";
constexpr const char* listener_label = "EXPORTER-troupe-lane-listener";

std::array<std::uint8_t, 12> nonce(std::uint64_t count) {
  std::array<std::uint8_t, 12> n{};
  for (int i = 0; i < 8; ++i) n[4 + i] = static_cast<std::uint8_t>(count >> (56 - 8 * i));
  return n;
}

void init(evp_cipher_ctx_st* c, const seal_key& key, bool encrypt) {
  if (encrypt)
    EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  else
    EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
}

}  // namespace

void sealer::ctx_free::operator()(evp_cipher_ctx_st* c) const { EVP_CIPHER_CTX_free(c); }

sealer::sealer(const seal_key& out, const seal_key& in) : enc_(EVP_CIPHER_CTX_new()), dec_(EVP_CIPHER_CTX_new()) {
  init(enc_.get(), out, true);
  init(dec_.get(), in, false);
}

expected<sealer> sealer::for_session(ssl_st* ssl, bool dialled) {
  seal_key mine{}, theirs{};
  const char* out_label = dialled ? dialler_label : listener_label;
  const char* in_label = dialled ? listener_label : dialler_label;
  if (SSL_export_keying_material(ssl, mine.data(), mine.size(), out_label, std::strlen(out_label), nullptr, 0, 0) != 1 ||
      SSL_export_keying_material(ssl, theirs.data(), theirs.size(), in_label, std::strlen(in_label), nullptr, 0, 0) != 1)
    return failure{"cannot take the lane's keys from its TLS session: " + tls_error_text()};
  sealer s(mine, theirs);
  OPENSSL_cleanse(mine.data(), mine.size());
  OPENSSL_cleanse(theirs.data(), theirs.size());
  return s;
}

void sealer::seal(const void* in, std::size_t n, std::uint8_t* out) {
  const auto iv = nonce(sealed_++);
  int len = 0;
  EVP_EncryptInit_ex(enc_.get(), nullptr, nullptr, nullptr, iv.data());
  EVP_EncryptUpdate(enc_.get(), out, &len, static_cast<const std::uint8_t*>(in), static_cast<int>(n));
  EVP_EncryptFinal_ex(enc_.get(), out + len, &len);
  EVP_CIPHER_CTX_ctrl(enc_.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(seal_tag), out + n);
}

bool sealer::open(void* inout, std::size_t n, const std::uint8_t* tag) {
  const auto iv = nonce(opened_++);
  auto* p = static_cast<std::uint8_t*>(inout);
  int len = 0;
  std::uint8_t expect[seal_tag];
  std::memcpy(expect, tag, seal_tag);
  return EVP_DecryptInit_ex(dec_.get(), nullptr, nullptr, nullptr, iv.data()) == 1 &&
         EVP_DecryptUpdate(dec_.get(), p, &len, p, static_cast<int>(n)) == 1 &&
         EVP_CIPHER_CTX_ctrl(dec_.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(seal_tag), expect) == 1 &&
         EVP_DecryptFinal_ex(dec_.get(), p + len, &len) == 1;
}

}  // namespace troupe::lane
