// Clears OpenSSL's error queue before every SSL_read and SSL_write in the process (the
// handshake guard, net/tls_handshake_guard.cpp, does it before SSL_connect and
// SSL_accept). It must be linked into each executable that uses CAF's OpenSSL module (the
// definitions interpose libssl's).
//
// Note [CAF 0.17 and OpenSSL's error queue]
// OpenSSL keeps one error queue per thread, and SSL_get_error() reports SSL_ERROR_SSL
// whenever that queue is not empty, even if the error belongs to another connection.
// CAF 0.17's openssl::session never clears it: once one peer closes without a TLS
// close_notify (a node exiting), its "unexpected eof" stays queued in the multiplexer
// thread, the next harmless SSL_ERROR_WANT_READ on any other connection is taken for a
// fatal error, and CAF drops that connection too. Measured here: every 4-node TLS job
// lost its connections at the first snapshot; with the queue cleared, none did.
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class Fn>
Fn real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

int SSL_read(SSL* s, void* buf, int num) {
  static const auto fn = real<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return fn(s, buf, num);
}

int SSL_write(SSL* s, const void* buf, int num) {
  static const auto fn = real<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return fn(s, buf, num);
}

}  // extern "C"
