// Tests for net/openssl_error_queue.cpp (Note [CAF 0.17 and OpenSSL's error queue]): on an
// established TLS connection, with another connection's error left in this thread's
// OpenSSL queue, a harmless "nothing to read" or "the socket is full" is still reported as
// SSL_ERROR_WANT_READ or SSL_ERROR_WANT_WRITE through the guarded SSL_read and SSL_write,
// while libssl's own functions, reached past the guard, report it as the fatal
// SSL_ERROR_SSL that made CAF drop healthy connections. The guarded calls still carry the
// bytes.
#define BOOST_TEST_MODULE openssl_error_queue
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"
#include "transport/tls.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

using read_fn = int (*)(SSL*, void*, int);
using write_fn = int (*)(SSL*, const void*, int);

// A worker and a server with certificates of one job CA, connected through an in-memory
// BIO pair of 16 KiB each way, their handshake done.
struct tls_pair {
  test::temp_dir dir{"openssl-error-queue"};
  tls_context worker_ctx, server_ctx;
  SSL* worker = nullptr;
  SSL* server = nullptr;

  tls_pair() {
    const std::string d = dir.path.string();
    BOOST_REQUIRE(create_ca(d, "test CA", 1h).has_value());
    BOOST_REQUIRE(issue_node_certificate(d, "worker-0", {"IP:127.0.0.1"}, -60s, 1h).has_value());
    BOOST_REQUIRE(issue_node_certificate(d, "server-0", {"IP:127.0.0.1"}, -60s, 1h).has_value());
    auto w = tls_context_for(tls_files_in(d, "worker-0"));
    auto s = tls_context_for(tls_files_in(d, "server-0"));
    BOOST_REQUIRE(w.has_value());
    BOOST_REQUIRE(s.has_value());
    worker_ctx = *w;
    server_ctx = *s;
    worker = SSL_new(worker_ctx.get());
    server = SSL_new(server_ctx.get());
    BOOST_REQUIRE((worker && server));
    BIO* worker_end = nullptr;
    BIO* server_end = nullptr;
    BOOST_REQUIRE(BIO_new_bio_pair(&worker_end, 16384, &server_end, 16384) == 1);
    SSL_set_bio(worker, worker_end, worker_end);  // each SSL owns its end now
    SSL_set_bio(server, server_end, server_end);
    SSL_set_connect_state(worker);
    SSL_set_accept_state(server);
    bool worker_done = false, server_done = false;
    for (int round = 0; round < 100 && !(worker_done && server_done); ++round) {
      if (!worker_done) worker_done = SSL_do_handshake(worker) == 1;
      if (!server_done) server_done = SSL_do_handshake(server) == 1;
    }
    BOOST_REQUIRE_MESSAGE(worker_done && server_done, "handshake: " << tls_error_text());
    ERR_clear_error();
  }
  ~tls_pair() {
    SSL_free(worker);
    SSL_free(server);
  }
  tls_pair(const tls_pair&) = delete;
  tls_pair& operator=(const tls_pair&) = delete;
};

// Another connection's leftover: a peer that closed without close_notify.
void leave_a_stale_error() {
  ERR_clear_error();
  ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  BOOST_REQUIRE(ERR_peek_error() != 0u);
}

// What fill_the_pipe writes: one buffer, so that a write retried after WANT_WRITE is the
// same write, as OpenSSL requires.
const std::vector<char> chunk(4096, 'g');

int write_chunk(SSL* s, write_fn write) { return write(s, chunk.data(), static_cast<int>(chunk.size())); }

// Writes through `write` until the 16 KiB pipe is full; the last call's result.
int fill_the_pipe(SSL* s, write_fn write) {
  int r = 1;
  for (int i = 0; i < 64 && r > 0; ++i) r = write_chunk(s, write);
  return r;
}

const auto real_read = reinterpret_cast<read_fn>(dlsym(RTLD_NEXT, "SSL_read"));
const auto real_write = reinterpret_cast<write_fn>(dlsym(RTLD_NEXT, "SSL_write"));

}  // namespace

BOOST_AUTO_TEST_CASE(the_guard_interposes_libssl) {
  BOOST_REQUIRE(real_read);
  BOOST_REQUIRE(real_write);
  BOOST_TEST(reinterpret_cast<void*>(real_read) != reinterpret_cast<void*>(&SSL_read));
  BOOST_TEST(reinterpret_cast<void*>(real_write) != reinterpret_cast<void*>(&SSL_write));
}

BOOST_AUTO_TEST_CASE(guarded_calls_carry_the_bytes) {
  tls_pair p;
  const std::string sent = "a gradient";
  BOOST_TEST(SSL_write(p.worker, sent.data(), static_cast<int>(sent.size())) == static_cast<int>(sent.size()));
  char buf[64] = {};
  const int got = SSL_read(p.server, buf, sizeof buf);
  BOOST_REQUIRE(got > 0);
  BOOST_TEST(std::string(buf, static_cast<std::size_t>(got)) == sent);
}

BOOST_AUTO_TEST_CASE(a_stale_error_does_not_turn_an_empty_read_into_a_fatal_one) {
  tls_pair p;
  leave_a_stale_error();
  char buf[16];
  const int r = SSL_read(p.server, buf, sizeof buf);
  BOOST_TEST(r <= 0);
  BOOST_TEST(SSL_get_error(p.server, r) == SSL_ERROR_WANT_READ);
}

BOOST_AUTO_TEST_CASE(a_stale_error_does_not_turn_a_full_pipe_into_a_fatal_write) {
  tls_pair p;
  leave_a_stale_error();
  const int r = fill_the_pipe(p.worker, &SSL_write);
  BOOST_TEST(r <= 0);
  BOOST_TEST(SSL_get_error(p.worker, r) == SSL_ERROR_WANT_WRITE);
}

// The trap the guard exists for, shown on libssl's own entry points: the same calls report
// the stale error as fatal, and once the queue is cleared the connection turns out fine.
BOOST_AUTO_TEST_CASE(past_the_guard_the_same_read_and_write_are_reported_fatal) {
  BOOST_REQUIRE(real_read);
  BOOST_REQUIRE(real_write);
  {
    tls_pair p;
    leave_a_stale_error();
    char buf[16];
    const int r = real_read(p.server, buf, sizeof buf);
    BOOST_TEST(SSL_get_error(p.server, r) == SSL_ERROR_SSL);
    ERR_clear_error();
    const int again = real_read(p.server, buf, sizeof buf);
    BOOST_TEST(SSL_get_error(p.server, again) == SSL_ERROR_WANT_READ);
  }
  {
    tls_pair p;
    const int full = fill_the_pipe(p.worker, real_write);
    BOOST_TEST(SSL_get_error(p.worker, full) == SSL_ERROR_WANT_WRITE);
    leave_a_stale_error();
    const int r = write_chunk(p.worker, real_write);
    BOOST_TEST(SSL_get_error(p.worker, r) == SSL_ERROR_SSL);
    ERR_clear_error();
    const int again = write_chunk(p.worker, real_write);
    BOOST_TEST(SSL_get_error(p.worker, again) == SSL_ERROR_WANT_WRITE);
  }
}
