// TLS material for a node: which files it uses, the preflight that checks them before
// the actor system exists (CAF would only notice at the first connection, and abort),
// and the private per-job CA that `troupe launch` creates: one CA, one certificate per
// node with serverAuth and clientAuth, files of mode 0600 in a directory of mode 0700.
// Every certificate carries its role (Note [Certificate roles] in
// net/tls_handshake_guard.cpp) and the hosts it may serve (subject alternative names).
// What TLS does not protect is in docs/DESIGN.md ("Process model and security").
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/expected.hpp"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX and SSL, named without OpenSSL's headers
struct ssl_st;

namespace troupe {

struct tls_files {
  std::string certificate;  // PEM chain; may hold the key too (one file: rotation is one rename)
  std::string key;          // PEM private key; may name the same file as certificate
  std::string ca;           // the job's CA, the only one trusted
  std::string passphrase;   // for an encrypted key
  bool any() const { return !certificate.empty() || !key.empty() || !ca.empty(); }
};

// DIR/<role>.pem when it exists, else DIR/node.pem (certificate chain followed by the key),
// and DIR/ca.pem.
tls_files tls_files_in(const std::string& dir, const std::string& role);

// The role a certificate is issued for, in its subject's organizational unit:
// "coordinator", "server" or "worker"; "any" for one that may act as every role.
inline constexpr const char* any_role = "any";
// The role of a certificate named `name`: the role its name starts with (worker-3 is a
// worker's), else "any".
std::string role_for_certificate_name(const std::string& name);
// The role written in a certificate's subject (X509*, untyped to keep OpenSSL out of this
// header); empty when it names none (a certificate from before roles, or another issuer).
std::string role_of_certificate(const void* x509);

// Loads the certificate, key and CA, checks that key and certificate match, that the
// node's own certificate verifies against the CA for both server and client use, and
// that it has not expired. Returns the first problem, as a message that names the file.
std::optional<std::string> tls_preflight(const tls_files& f);

// An OpenSSL context for this node's own connections outside CAF (the bulk lanes, Note
// [Bulk lanes] in transport/lane.hpp), as strict as CAF's: TLS 1.2 at least, the node's
// certificate and key, the job's CA as the only trust anchor, and the peer's certificate
// required and verified on both sides. A failure names the file.
using tls_context = std::shared_ptr<ssl_ctx_st>;
expected<tls_context> tls_context_for(const tls_files& f);
// Makes the handshake of `s` (a dialling session) fail unless the peer's certificate
// names `host` (an IP address or a DNS name; wildcards only as the CA issued them).
void expect_host(ssl_st* s, const std::string& host);
// OpenSSL's most recent error as text, clearing its thread's queue.
std::string tls_error_text();

// Creates a private CA in `dir` (ca.pem, ca.key), then one combined certificate+key file
// per node (`<name>.pem`, role role_for_certificate_name(name)) valid from `not_before`
// (relative to now, may be negative) for `valid_for`, with the given subject alternative
// names ("DNS:x" / "IP:a.b.c.d").
expected<bool> create_ca(const std::string& dir, const std::string& common_name, std::chrono::hours valid_for);
expected<std::string> issue_node_certificate(const std::string& ca_dir, const std::string& name,
                                             const std::vector<std::string>& sans, std::chrono::seconds not_before,
                                             std::chrono::seconds valid_for);

}  // namespace troupe
