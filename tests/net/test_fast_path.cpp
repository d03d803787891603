// The same-host fast path (Note [Same-host fast path] in transport/shared_slots.hpp) with real
// `troupe node` processes over mutual TLS on loopback: a job gives the same bits with the
// fast path on, off, and refused by its shard (which then answers over the network), and
// so does a job with 2-bit pushes (copied into the slot) on and off, a job whose
// gradient buckets go in pieces over the network, and one whose tensors take a bulk lane
// over the network (Note [Bulk lanes]) or go in the messages; a
// segment a crashed process of the job left behind is removed by the next node of the job
// to start; a worker killed while it trains leaves no segment behind. Once the channel is
// confirmed the worker's pushes and pulls go through its doorbell (Note [Doorbells] in
// transport/doorbell.hpp) with the same bits as without (--no-doorbells), and a call through it
// that a stopped shard never answers fails within the request timeout, closing the
// doorbell, instead of hanging the worker.
#define BOOST_TEST_MODULE fast_path
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "net/job_secret.hpp"
#include "tests/support/secured_job.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

const job_pki& pki() {
  static const job_pki p;
  return p;
}

// The segments of the job `id` in /dev/shm now.
int segments_of(const std::string& id) {
  const auto secret = load_job_secret(pki().secret());
  BOOST_REQUIRE(secret.has_value());
  const std::string prefix = "troupe-" + shared_memory_tag(*secret, id) + "-";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

struct job_run {
  nlohmann::json result;
  std::string worker_log, server_log;
};

// A 1-worker sync job (deterministic to the bit) with the server's, worker's and job's
// (the coordinator's) extra flags.
job_run run_job(const std::string& id, const std::vector<std::string>& server_extra,
                const std::vector<std::string>& worker_extra, const std::vector<std::string>& job_extra = {}) {
  coordinator_under_attack c(id, cat(pki().tls("coordinator"), job_extra));
  background_process s(
      cat(cat({troupe_bin(), "node", "--role", "server", "--join", c.address(), "--job-id", id}, pki().tls("server")),
          server_extra),
      c.dir.file("server"));
  background_process w(
      cat(cat({troupe_bin(), "node", "--role", "worker", "--join", c.address(), "--job-id", id}, pki().tls("worker")),
          worker_extra),
      c.dir.file("worker"));
  const auto code = c.coord->wait(120s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), "the job did not end: " << c.coord->err() << w.err() << s.err());
  BOOST_REQUIRE_MESSAGE(*code == 0, c.coord->err() << w.err() << s.err());
  BOOST_TEST((w.wait(20s) == std::optional<int>(0)), w.err());
  BOOST_TEST((s.wait(20s).has_value()), s.err());
  return {nlohmann::json::parse(c.coord->out()), w.err(), s.err()};
}

bool says(const std::string& log, const std::string& text) { return log.find(text) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(a_job_gives_the_same_bits_with_the_fast_path_on_off_and_refused) {
  const auto on = run_job("fast-on", {}, {});
  BOOST_TEST(says(on.worker_log, "exchanges tensors with shard 0 through shared memory"), on.worker_log);
  BOOST_TEST(says(on.worker_log, "sends its pushes and pulls to shard 0 through the channel's doorbell"),
             on.worker_log);
  BOOST_TEST(segments_of("fast-on") == 0);

  const auto no_bells = run_job("fast-on", {}, {"--no-doorbells"});
  BOOST_TEST(says(no_bells.worker_log, "through shared memory"), no_bells.worker_log);
  BOOST_TEST(!says(no_bells.worker_log, "doorbell"), no_bells.worker_log);

  const auto off = run_job("fast-on", {"--no-shared-memory"}, {"--no-shared-memory"});
  BOOST_TEST(!says(off.worker_log, "shared memory"), off.worker_log);

  // The shard will not map the worker's segment: it answers in the message, and the worker
  // closes its channel and goes on over the network.
  const auto refused = run_job("fast-on", {"--no-shared-memory"}, {});
  BOOST_TEST(says(refused.worker_log, "could not map it"), refused.worker_log);
  BOOST_TEST(!says(refused.worker_log, "through shared memory"), refused.worker_log);
  BOOST_TEST(segments_of("fast-on") == 0);

  const auto fnv = on.result["params_fnv1a"].get<std::string>();
  BOOST_TEST(fnv.size() == 16u);
  BOOST_TEST(off.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(refused.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(no_bells.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(on.result["rejected_messages"].get<int>() == 0);
}

// Note [Gradient buckets]: over the network the worker pushes each bucket's piece while
// backward goes on; through shared memory it pushes whole slices (one slot per push). The
// bits are those of the job without buckets either way.
BOOST_AUTO_TEST_CASE(gradient_buckets_go_in_pieces_over_the_network_and_change_no_bit) {
  const std::vector<std::string> per_layer{"--bucket-bytes", "1"}, none{"--bucket-bytes", "0"};
  const std::vector<std::string> off{"--no-shared-memory"};
  const auto pieces = run_job("fast-buckets", off, off, per_layer);
  BOOST_TEST(says(pieces.worker_log, "pushes its gradient to shard 0 in pieces"), pieces.worker_log);
  const auto whole = run_job("fast-buckets", off, off, none);
  BOOST_TEST(!says(whole.worker_log, "in pieces"), whole.worker_log);
  const auto shared = run_job("fast-buckets", {}, {}, per_layer);
  BOOST_TEST(says(shared.worker_log, "through shared memory"), shared.worker_log);
  BOOST_TEST(!says(shared.worker_log, "in pieces"), shared.worker_log);
  const auto fnv = whole.result["params_fnv1a"].get<std::string>();
  BOOST_TEST(pieces.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(shared.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(pieces.result["rejected_messages"].get<int>() == 0);
  BOOST_TEST(pieces.result["push_bytes_per_step"].get<double>() == whole.result["push_bytes_per_step"].get<double>());
}

// Note [Bulk lanes]: over the network a worker's slice (940 KB) and a bucket's large piece
// go on the lane, small pieces in the messages; the bits are those of the messages.
BOOST_AUTO_TEST_CASE(large_tensors_take_a_bulk_lane_over_the_network_and_change_no_bit) {
  const std::vector<std::string> off{"--no-shared-memory"}, no_lanes{"--no-shared-memory", "--no-bulk-lanes"};
  const auto lane = run_job("fast-lanes", off, off);
  BOOST_TEST(says(lane.worker_log, "exchanges large tensors with shard 0 over a bulk lane"), lane.worker_log);
  BOOST_TEST(says(lane.server_log, "members may open theirs at"), lane.server_log);
  const auto messages = run_job("fast-lanes", no_lanes, no_lanes);
  BOOST_TEST(!says(messages.worker_log, "bulk lane"), messages.worker_log);
  BOOST_TEST(!says(messages.server_log, "bulk lane"), messages.server_log);
  const auto pieces = run_job("fast-lanes", off, off, {"--bucket-bytes", "1"});
  BOOST_TEST(says(pieces.worker_log, "over a bulk lane"), pieces.worker_log);
  BOOST_TEST(says(pieces.worker_log, "in pieces"), pieces.worker_log);
  const auto fnv = messages.result["params_fnv1a"].get<std::string>();
  BOOST_TEST(lane.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(pieces.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(lane.result["rejected_messages"].get<int>() == 0);
}

// A 2-bit gradient is packed outside the slot and copied into it; the bits are those of
// the same job over the network. (Without buckets: 2-bit blocks start at each piece, and
// over the network the worker would push pieces, through shared memory whole slices.)
// With buckets over the network the shard decodes every piece.
BOOST_AUTO_TEST_CASE(encoded_pushes_cross_the_fast_path_with_the_bits_of_the_network) {
  const std::vector<std::string> two_bit{"--compression", "2bit", "--bucket-bytes", "0"};
  const auto on = run_job("fast-2bit", {}, {}, two_bit);
  BOOST_TEST(says(on.worker_log, "exchanges tensors with shard 0 through shared memory"), on.worker_log);
  const auto off = run_job("fast-2bit", {"--no-shared-memory"}, {"--no-shared-memory"}, two_bit);
  BOOST_TEST(!says(off.worker_log, "shared memory"), off.worker_log);
  BOOST_TEST(on.result["params_fnv1a"].get<std::string>() == off.result["params_fnv1a"].get<std::string>());
  BOOST_TEST(on.result["rejected_messages"].get<int>() == 0);
  // 2-bit: about 1/16 of the f32 bytes the same job pushes without compression.
  const auto plain = run_job("fast-2bit", {}, {});
  BOOST_TEST(on.result["push_bytes_per_step"].get<double>() * 14 < plain.result["push_bytes_per_step"].get<double>());
  const auto pieces = run_job("fast-2bit", {"--no-shared-memory"}, {"--no-shared-memory"},
                              {"--compression", "2bit", "--bucket-bytes", "1"});
  BOOST_TEST(says(pieces.worker_log, "in pieces"), pieces.worker_log);
  BOOST_TEST(pieces.result["rejected_messages"].get<int>() == 0);
  BOOST_TEST(pieces.result["push_bytes_per_step"].get<double>() * 14 < plain.result["push_bytes_per_step"].get<double>());
}

// 2-bit pulls (Note [2-bit pulls]) between processes: the member's view and the shard's
// stay in step over the network, whether the fast path is off or refused at the first
// pull (the same bits both ways), and through the fast path the answers are the f32
// values (the bits of a job without 2-bit pulls).
BOOST_AUTO_TEST_CASE(two_bit_pulls_keep_member_and_shard_in_step_and_the_fast_path_carries_f32) {
  const std::vector<std::string> two_bit{"--pull-precision", "2bit"};
  const auto off = run_job("fast-2bitpull", {"--no-shared-memory"}, {"--no-shared-memory"}, two_bit);
  const auto refused = run_job("fast-2bitpull", {"--no-shared-memory"}, {}, two_bit);
  BOOST_TEST(says(refused.worker_log, "could not map it"), refused.worker_log);
  const auto fnv = off.result["params_fnv1a"].get<std::string>();
  BOOST_TEST(refused.result["params_fnv1a"].get<std::string>() == fnv);
  BOOST_TEST(off.result["rejected_messages"].get<int>() == 0);

  const auto on = run_job("fast-2bitpull", {}, {}, two_bit);
  BOOST_TEST(says(on.worker_log, "exchanges tensors with shard 0 through shared memory"), on.worker_log);
  const auto exact = run_job("fast-2bitpull", {}, {});
  BOOST_TEST(on.result["params_fnv1a"].get<std::string>() == exact.result["params_fnv1a"].get<std::string>());
  BOOST_TEST(fnv != exact.result["params_fnv1a"].get<std::string>());  // over the network the views trailed
}

BOOST_AUTO_TEST_CASE(a_crashed_processes_segment_is_swept_and_a_killed_worker_leaves_none) {
  const std::string id = "fast-sweep";
  const auto secret = load_job_secret(pki().secret());
  BOOST_REQUIRE(secret.has_value());
  // What a worker killed between creating its segment and its first answer leaves: a
  // segment of the job named after a process that is gone.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  const std::string left = "/troupe-" + shared_memory_tag(*secret, id) + "-" + std::to_string(gone) + "-0-0badcafe";
  const int fd = shm_open(left.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  BOOST_REQUIRE(fd >= 0);
  close(fd);
  BOOST_TEST(segments_of(id) == 1);

  temp_dir dir("fast-sweep");
  background_process coord(cat({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:0", "--job-id", id,
                                "--dataset", "synthetic", "--train-samples", "20000", "--epochs", "50", "--workers",
                                "1", "--servers", "1", "--mode", "async"},
                               pki().tls("coordinator")),
                           dir.file("coordinator"));
  const auto port = coord.wait_for_port("listening on ", 60s);
  BOOST_REQUIRE_MESSAGE(port.has_value(), coord.err());
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  background_process server(
      cat({troupe_bin(), "node", "--role", "server", "--join", address, "--job-id", id}, pki().tls("server")),
      dir.file("server"));
  background_process worker(
      cat({troupe_bin(), "node", "--role", "worker", "--join", address, "--job-id", id}, pki().tls("worker")),
      dir.file("worker"));
  BOOST_REQUIRE_MESSAGE(worker.wait_for_err("through shared memory", 60s), worker.err());
  BOOST_TEST((says(server.err(), "removed 1 shared-memory segments") ||
              says(worker.err(), "removed 1 shared-memory segments")),
             server.err() << worker.err());
  BOOST_TEST(segments_of(id) == 0);

  worker.signal(SIGKILL);  // while it trains
  BOOST_TEST(worker.wait(10s).has_value());
  const auto code = coord.wait(60s);
  BOOST_REQUIRE_MESSAGE(code.has_value(), coord.err());
  BOOST_TEST(*code != 0);  // its only worker is gone
  BOOST_TEST(segments_of(id) == 0);
}

BOOST_AUTO_TEST_CASE(a_doorbell_call_a_stopped_shard_never_answers_fails_within_the_request_timeout) {
  const std::string id = "fast-stopped";
  temp_dir dir("fast-stopped");
  // Heartbeats would drop the stopped shard's connection after 30 s; the request timeout
  // of 2 s comes first, so the doorbell's own deadline is what ends the wait.
  const std::vector<std::string> slow_heartbeat{"--connection-timeout", "30"};
  background_process coord(cat(cat({troupe_bin(), "node", "--role", "coordinator", "--listen", "127.0.0.1:0",
                                    "--job-id", id, "--dataset", "synthetic", "--train-samples", "20000", "--epochs",
                                    "50", "--workers", "1", "--servers", "1", "--mode", "async", "--request-timeout",
                                    "2", "--stall-timeout", "60"},
                                   pki().tls("coordinator")),
                               slow_heartbeat),
                           dir.file("coordinator"));
  const auto port = coord.wait_for_port("listening on ", 60s);
  BOOST_REQUIRE_MESSAGE(port.has_value(), coord.err());
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  background_process server(
      cat(cat({troupe_bin(), "node", "--role", "server", "--join", address, "--job-id", id}, pki().tls("server")),
          slow_heartbeat),
      dir.file("server"));
  background_process worker(
      cat(cat({troupe_bin(), "node", "--role", "worker", "--join", address, "--job-id", id}, pki().tls("worker")),
          slow_heartbeat),
      dir.file("worker"));
  BOOST_REQUIRE_MESSAGE(worker.wait_for_err("through the channel's doorbell", 60s), worker.err());
  server.signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  BOOST_TEST(worker.wait_for_err("had no answer within the request timeout (2000 ms)", 20s), worker.err());
  BOOST_TEST((std::chrono::steady_clock::now() - stopped < 15s));
  // The worker stops with the failed call named; it does not hang.
  BOOST_TEST(worker.wait(20s).has_value(), worker.err());
  BOOST_TEST(says(worker.err(), "failed"), worker.err());
  server.signal(SIGCONT);
  server.signal(SIGKILL);
  BOOST_TEST(coord.wait(60s).has_value(), coord.err());
}
