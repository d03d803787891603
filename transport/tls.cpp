// OpenSSL: the preflight checks and the per-job CA.
#include "transport/tls.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

namespace troupe {

namespace {

// ---------------------------------------------------------------------------------------
// RAII for OpenSSL handles

template <class T, void (*Free)(T*)>
struct ossl_deleter {
  void operator()(T* p) const { Free(p); }
};
using ctx_ptr = std::unique_ptr<SSL_CTX, ossl_deleter<SSL_CTX, SSL_CTX_free>>;
using x509_ptr = std::unique_ptr<X509, ossl_deleter<X509, X509_free>>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, ossl_deleter<EVP_PKEY, EVP_PKEY_free>>;
using store_ptr = std::unique_ptr<X509_STORE, ossl_deleter<X509_STORE, X509_STORE_free>>;
using store_ctx_ptr = std::unique_ptr<X509_STORE_CTX, ossl_deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using bio_ptr = std::unique_ptr<BIO, ossl_deleter<BIO, BIO_free_all>>;

struct file_closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

// The most recent OpenSSL error as text, clearing the queue.
std::string ossl_error() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out = buf;  // keep the last, most specific one
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

bool file_mentions(const std::string& path, const std::string& word) {
  file_ptr f(std::fopen(path.c_str(), "r"));
  if (!f) return false;
  char line[512];
  while (std::fgets(line, sizeof line, f.get()))
    if (std::string_view(line).find(word) != std::string_view::npos) return true;
  return false;
}

int passphrase_cb(char* buf, int size, int, void* user) {
  const auto* pass = static_cast<const std::string*>(user);
  const int n = static_cast<int>(std::min<std::size_t>(pass->size(), static_cast<std::size_t>(size)));
  std::copy(pass->data(), pass->data() + n, buf);
  return n;
}

std::optional<std::string> verify_purpose(X509_STORE* store, X509* cert, STACK_OF(X509) * chain, int purpose,
                                          const char* what, const std::string& ca) {
  store_ctx_ptr sctx(X509_STORE_CTX_new());
  if (!sctx || X509_STORE_CTX_init(sctx.get(), store, cert, chain) != 1) return "cannot set up verification";
  X509_STORE_CTX_set_purpose(sctx.get(), purpose);
  if (X509_verify_cert(sctx.get()) == 1) return std::nullopt;
  return std::string("the node's own certificate does not verify against the CA ") + ca + " for " + what + " use: " +
         X509_verify_cert_error_string(X509_STORE_CTX_get_error(sctx.get()));
}

}  // namespace

std::string tls_error_text() { return ossl_error(); }

expected<tls_context> tls_context_for(const tls_files& f) {
  ERR_clear_error();
  tls_context ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (!ctx) return failure{"cannot create an OpenSSL context: " + ossl_error()};
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  std::string pass = f.passphrase;  // only read while the key loads
  SSL_CTX_set_default_passwd_cb(ctx.get(), passphrase_cb);
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), &pass);
  const bool loaded = SSL_CTX_use_certificate_chain_file(ctx.get(), f.certificate.c_str()) == 1 &&
                      SSL_CTX_use_PrivateKey_file(ctx.get(), f.key.c_str(), SSL_FILETYPE_PEM) == 1 &&
                      SSL_CTX_check_private_key(ctx.get()) == 1;
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), nullptr);
  if (!loaded) return failure{"cannot load " + f.certificate + " and its key " + f.key + ": " + ossl_error()};
  if (SSL_CTX_load_verify_locations(ctx.get(), f.ca.c_str(), nullptr) != 1)
    return failure{"cannot load the CA " + f.ca + ": " + ossl_error()};
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_num_tickets(ctx.get(), 0);  // nobody resumes: a ticket would be bytes a one-way connection never reads
  return ctx;
}

void expect_host(SSL* s, const std::string& host) {
  X509_VERIFY_PARAM* param = SSL_get0_param(s);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  in6_addr ignored{};
  const bool numeric =
      inet_pton(AF_INET, host.c_str(), &ignored) == 1 || inet_pton(AF_INET6, host.c_str(), &ignored) == 1;
  if (numeric)
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  else
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
}

tls_files tls_files_in(const std::string& dir, const std::string& role) {
  const auto d = std::filesystem::path(dir);
  tls_files f;
  f.certificate = (d / (role + ".pem")).string();
  if (!std::filesystem::exists(f.certificate)) f.certificate = (d / "node.pem").string();
  f.key = f.certificate;
  f.ca = (d / "ca.pem").string();
  return f;
}

std::optional<std::string> tls_preflight(const tls_files& f) {
  if (f.certificate.empty() || f.key.empty() || f.ca.empty())
    return "TLS needs a certificate, a key and the job's CA (--tls-cert, --tls-key and --tls-ca, or --tls-dir "
           "DIR with DIR/node.pem and DIR/ca.pem); one of them is missing";
  for (const auto* path : {&f.certificate, &f.key, &f.ca})
    if (!std::filesystem::is_regular_file(*path)) return *path + ": no such file";
  ERR_clear_error();
  ctx_ptr ctx(SSL_CTX_new(TLS_method()));
  if (!ctx) return "cannot create an OpenSSL context: " + ossl_error();
  std::string pass = f.passphrase;
  SSL_CTX_set_default_passwd_cb(ctx.get(), passphrase_cb);
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), &pass);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), f.certificate.c_str()) != 1)
    return "cannot load the certificate " + f.certificate + ": " + ossl_error();
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), f.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string why = ossl_error();
    if (why.find("key values mismatch") != std::string::npos)
      return "the key " + f.key + " does not belong to the certificate " + f.certificate;
    if (file_mentions(f.key, "ENCRYPTED"))
      return "cannot decrypt the private key " + f.key +
             (f.passphrase.empty() ? ": it is encrypted; give its passphrase (--tls-passphrase-file)" : ": wrong passphrase?");
    return "cannot load the private key " + f.key + ": " + why;
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return "the key " + f.key + " does not belong to the certificate " + f.certificate + ": " + ossl_error();
  store_ptr store(X509_STORE_new());
  if (!store || X509_STORE_load_file(store.get(), f.ca.c_str()) != 1)
    return "cannot load the CA " + f.ca + ": " + ossl_error();
  X509* own = SSL_CTX_get0_certificate(ctx.get());
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx.get(), &chain);
  if (auto e = verify_purpose(store.get(), own, chain, X509_PURPOSE_SSL_SERVER, "server", f.ca)) return e;
  if (auto e = verify_purpose(store.get(), own, chain, X509_PURPOSE_SSL_CLIENT, "client", f.ca)) return e;
  return std::nullopt;
}

namespace {

bool add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

x509_ptr new_certificate(EVP_PKEY* key, const std::string& cn, std::chrono::seconds not_before,
                         std::chrono::seconds valid_for, const std::string& role = {}) {
  x509_ptr cert(X509_new());
  if (!cert) return nullptr;
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof serial);
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), static_cast<long>(not_before.count()));
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>((not_before + valid_for).count()));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  if (!role.empty())
    X509_NAME_add_entry_by_txt(name, "OU", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(role.c_str()), -1, -1,
                               0);
  return cert;
}

// Opens `path` for writing with mode 0600 (created or truncated).
file_ptr open_private(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  ::fchmod(fd, 0600);
  return file_ptr(::fdopen(fd, "w"));
}

expected<bool> ensure_private_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return failure{"cannot create " + dir + ": " + ec.message()};
  if (::chmod(dir.c_str(), 0700) != 0) return failure{"cannot make " + dir + " private (mode 0700)"};
  return true;
}

pkey_ptr read_key(const std::string& path) {
  file_ptr f(std::fopen(path.c_str(), "r"));
  return pkey_ptr(f ? PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr) : nullptr);
}

x509_ptr read_cert(const std::string& path) {
  file_ptr f(std::fopen(path.c_str(), "r"));
  return x509_ptr(f ? PEM_read_X509(f.get(), nullptr, nullptr, nullptr) : nullptr);
}

}  // namespace

std::string role_for_certificate_name(const std::string& name) {
  for (const char* role : {"coordinator", "server", "worker"})
    if (name.rfind(role, 0) == 0) return role;
  return any_role;
}

std::string role_of_certificate(const void* x509) {
  if (x509 == nullptr) return {};
  const X509_NAME* subject = X509_get_subject_name(static_cast<const X509*>(x509));
  const int i = X509_NAME_get_index_by_NID(subject, NID_organizationalUnitName, -1);
  if (i < 0) return {};
  const ASN1_STRING* value = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
                     static_cast<std::size_t>(ASN1_STRING_length(value)));
}

expected<bool> create_ca(const std::string& dir, const std::string& common_name, std::chrono::hours valid_for) {
  if (auto ok = ensure_private_dir(dir); !ok) return ok.error();
  pkey_ptr key(EVP_EC_gen("P-256"));
  if (!key) return failure{"cannot generate the CA key: " + ossl_error()};
  x509_ptr cert = new_certificate(key.get(), common_name, std::chrono::seconds(-300), valid_for);
  if (!cert) return failure{"cannot create the CA certificate: " + ossl_error()};
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  if (!add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash") ||
      X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0)
    return failure{"cannot sign the CA certificate: " + ossl_error()};
  const auto d = std::filesystem::path(dir);
  file_ptr kf = open_private((d / "ca.key").string()), cf = open_private((d / "ca.pem").string());
  if (!kf || !cf) return failure{"cannot write the CA into " + dir};
  if (PEM_write_PrivateKey(kf.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_X509(cf.get(), cert.get()) != 1)
    return failure{"cannot write the CA into " + dir + ": " + ossl_error()};
  return true;
}

expected<std::string> issue_node_certificate(const std::string& ca_dir, const std::string& name,
                                             const std::vector<std::string>& sans, std::chrono::seconds not_before,
                                             std::chrono::seconds valid_for) {
  const auto d = std::filesystem::path(ca_dir);
  pkey_ptr ca_key = read_key((d / "ca.key").string());
  x509_ptr ca_cert = read_cert((d / "ca.pem").string());
  if (!ca_key || !ca_cert) return failure{"cannot read the CA in " + ca_dir + " (ca.pem, ca.key)"};
  pkey_ptr key(EVP_EC_gen("P-256"));
  if (!key) return failure{"cannot generate a node key: " + ossl_error()};
  x509_ptr cert = new_certificate(key.get(), name, not_before, valid_for, role_for_certificate_name(name));
  if (!cert) return failure{"cannot create the certificate of " + name + ": " + ossl_error()};
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  std::string alt;
  for (const auto& s : sans) alt += (alt.empty() ? "" : ",") + s;
  if (!add_ext(cert.get(), ca_cert.get(), NID_basic_constraints, "CA:FALSE") ||
      !add_ext(cert.get(), ca_cert.get(), NID_key_usage, "critical,digitalSignature") ||
      !add_ext(cert.get(), ca_cert.get(), NID_ext_key_usage, "serverAuth,clientAuth") ||
      !add_ext(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid") ||
      (!alt.empty() && !add_ext(cert.get(), ca_cert.get(), NID_subject_alt_name, alt.c_str())) ||
      X509_sign(cert.get(), ca_key.get(), EVP_sha256()) <= 0)
    return failure{"cannot sign the certificate of " + name + ": " + ossl_error()};
  const std::string path = (d / (name + ".pem")).string();
  file_ptr f = open_private(path);
  if (!f) return failure{"cannot write " + path};
  if (PEM_write_X509(f.get(), cert.get()) != 1 ||
      PEM_write_PrivateKey(f.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return failure{"cannot write " + path + ": " + ossl_error()};
  return path;
}

}  // namespace troupe
