// bench_ps: push and pull of one large parameter block between two processes, through a
// real shard server (validation and an SGD update on every push). `serve` runs the shard
// with a stand-in coordinator (actors/lone_shard.hpp) and publishes the coordinator;
// `client` joins it as the job's one member, times REPS pushes and pulls against the shard
// it is given, and prints one JSON line with the medians. With --shm-tag (the same 16 hex
// digits on both sides) they use the same-host fast path as a worker does (Note [Same-host
// fast path] in transport/shared_slots.hpp): the client packs each gradient into its push slot
// and copies each answer out of its reply slot, so each tensor still crosses memory once.
// With --lane (both sides) they move the tensors on a bulk lane (Note [Bulk lanes] in
// transport/lane.hpp), as a worker does with a shard on another host: the client moves each
// gradient onto the lane and takes each answer off it; the messages carry tickets.
// Without --tls-dir both sides run with --insecure-network and need --secret-file.
//   bench_ps serve  --listen 127.0.0.1:P [--floats N] [--tls-dir DIR | --secret-file F] [--shm-tag HEX] [--lane]
//   bench_ps client --join 127.0.0.1:P [--floats N] [--reps 10] [--tls-dir DIR | --secret-file F]
//                   [--shm-tag HEX] [--lane]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <iostream>
#include <thread>

#include "actors/lone_shard.hpp"
#include "actors/shard_server.hpp"
#include "net/node.hpp"
#include "net/node_runtime.hpp"
#include "transport/shared_slots.hpp"

using namespace troupe;

namespace {

// A model of about `floats` parameters (one big block): mlp:IN-10 has IN*10 + 10.
job_spec block_job(std::int64_t floats) {
  job_spec j;
  j.job_id = "bench";
  const std::int64_t in = std::max<std::int64_t>(1, (floats - 10) / 10);
  j.train.model = "mlp:" + std::to_string(in) + "-10";
  j.train.warmup_epochs = 0.f;
  j.input_shape = {in};
  j.num_classes = 10;
  j.train_size = 1000;
  j.workers = 1;
  j.servers = 1;
  j.mode = sync_mode::async;
  return j;
}

node_plan plan_for(const std::string& listen_or_join, const std::string& tls_dir, const std::string& secret_file,
                   bool serve) {
  node_options o;
  o.role = serve ? node_role::coordinator : node_role::worker;  // the roles whose addresses these are
  (serve ? o.listen : o.join) = listen_or_join;
  if (!serve) o.listen = "127.0.0.1:0";
  o.tls_dir = tls_dir;
  o.insecure_network = tls_dir.empty();
  o.secret_file = secret_file;
  o.job_id = "bench";
  auto p = resolve_node_options(o);
  if (!p) {
    std::cerr << p.error().message << "\n";
    std::exit(2);
  }
  return *p;
}

int serve(const std::string& listen, const std::string& tls_dir, const std::string& secret_file, std::int64_t floats,
          const std::string& shm_tag, bool lane) {
  const node_plan plan = plan_for(listen, tls_dir, secret_file, true);
  node_plan lane_plan = plan;  // the lane is the shard's: it shows a server's certificate
  lane_plan.bulk_lanes = lane;
  if (!tls_dir.empty()) lane_plan.tls = tls_files_in(tls_dir, "server");
  auto lanes = shard_lanes_for(lane_plan);
  if (!lanes) {
    std::cerr << lanes.error().message << "\n";
    return 1;
  }
  caf::actor_system_config cfg;
  configure_node(cfg, plan);
  caf::actor_system sys{cfg};
  const job_spec job = block_job(floats);
  const std::int64_t numel = build_model(job)->num_params();
  auto coord = spawn_lone_coordinator(sys, job, numel);
  auto shard = spawn_shard_server(sys, coord, "bench", std::chrono::seconds(10), {}, shm_tag, *lanes);
  join_as_shard(shard, {}, 0);
  auto port = publish_on(sys, coordinator_actor{coord}, plan.listen, plan.tls.any());
  if (!port) {
    std::cerr << "cannot listen: " << describe(port.error()) << "\n";
    return 1;
  }
  std::cout << "listening " << *port << std::endl;
  std::string line;
  std::getline(std::cin, line);  // until the bench script closes our stdin
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  std::_Exit(0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// What the client's lane end reports, waited for by the timing loop.
struct lane_inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, tensor> payloads;
  bool opened = false;
  std::string closed;

  template <class F>
  void update(F f) {
    {
      std::lock_guard l(mu);
      f();
    }
    cv.notify_all();
  }
  // The payload of `ticket`, waiting at most 60 s; empty when the lane closed or it did not come.
  tensor take(std::uint64_t ticket) {
    std::unique_lock l(mu);
    cv.wait_for(l, std::chrono::seconds(60), [&] { return payloads.contains(ticket) || !closed.empty(); });
    auto it = payloads.find(ticket);
    if (it == payloads.end()) return {};
    tensor t = std::move(it->second);
    payloads.erase(it);
    return t;
  }
};

[[noreturn]] void die(const std::string& why) {
  std::cerr << why << "\n";
  std::_Exit(1);
}

// The job's one member, with what it moves tensors through: the same-host channel, a bulk
// lane, or neither (the messages).
struct bench_client {
  bench_client(node_plan p, std::int64_t n, caf::scoped_actor& s) : plan(std::move(p)), numel(n), self(s) {}

  node_plan plan;
  std::int64_t numel = 0;
  caf::scoped_actor& self;
  std::chrono::seconds timeout{60};
  shard_actor shard;
  std::optional<shm::shard_channel> channel;
  std::shared_ptr<lane::member_end> lanes;
  lane_inbox inbox;
  std::uint64_t next_ticket = 1;
  std::int64_t version = 0;

  // Joins as the job's one member; the stand-in starts the shard with this actor as rank 0.
  void join(const coordinator_actor& coord) {
    bool ok = true;
    self->request(coord, timeout, join_atom::value, worker_join{"bench", {}, 0, {}, {}, -1})
        .receive([&](worker_welcome& w) { if (!w.shards.empty()) shard = w.shards[0]; }, [&](caf::error& e) {
          std::cerr << "join failed: " << describe(e) << "\n";
          ok = false;
        });
    if (!ok || !shard) die("the stand-in coordinator named no shard");
  }

  void open_channel(const std::string& shm_tag) {
    if (shm_tag.empty()) return;
    auto made = shm::shard_channel::create(shm_tag, shm::slot_bytes_for(numel), 0);
    if (!made) die(made.error().message);
    channel = std::move(*made);
  }

  // Opened before the timing, as a worker's first pulls open it.
  void open_lane() {
    if (!lanes) return;
    lanes->start({[&](std::uint32_t) { inbox.update([&] { inbox.opened = true; }); },
                  [&](std::uint32_t, std::uint64_t t, tensor x) {
                    inbox.update([&] { inbox.payloads.emplace(t, std::move(x)); });
                  },
                  [&](std::uint32_t, const std::string& why) { inbox.update([&] { inbox.closed = why; }); }});
    self->request(shard, timeout, lane_open_atom::value, std::uint32_t{0})
        .receive([&](const lane_offer& o) { lanes->open(0, plan.join->host, o); },
                 [&](caf::error& e) { die("the shard offered no lane: " + describe(e)); });
    std::unique_lock l(inbox.mu);
    inbox.cv.wait_for(l, std::chrono::seconds(30), [&] { return inbox.opened || !inbox.closed.empty(); });
    if (!inbox.opened) die("the lane did not open: " + inbox.closed);
  }

  // Pushes `grad` as a worker does at clock r: packed into the channel's slot, moved onto
  // the lane, or in the message.
  void push(const tensor& grad, int r) {
    kv_push p = step_push(0, 0, 0, r, version, tensor());
    if (auto buffer = channel ? channel->lend_push_buffer(numel) : std::nullopt) {
      copy(*buffer, grad);  // a worker packs its gradient here
      p.shared = *channel->put_push(*buffer);
    } else if (lanes) {
      tensor packed(grad);  // as p.data = grad below: a worker packs its gradient
      const std::uint64_t ticket = next_ticket++;
      p.lane = lane::describe(ticket, packed);
      if (!lanes->send(0, ticket, std::move(packed))) die("the lane closed: " + inbox.closed);
    } else {
      p.data = grad;
    }
    self->request(shard, timeout, push_atom::value, std::move(p))
        .receive([&](const kv_push_ack& a) { version = a.versions.at(0); },
                 [&](caf::error& e) { die("push failed: " + describe(e)); });
    if (channel) channel->push_settled(false);
  }

  // Pulls at clock r and unpacks the answer into `params`, as a worker does.
  void pull(tensor& params, int r) {
    kv_pull q = step_pull(0, 0, 0, r + 1);
    if (auto slot = channel ? channel->lend_reply_slot() : std::nullopt) q.reply_to = *slot;
    if (lanes) q.lane_reply = next_ticket++;
    bool ok = true;
    self->request(shard, timeout, pull_atom::value, q)
        .receive(
            [&](kv_pull_reply& a) {
              if (!a.shared.empty() && channel) {
                auto got = channel->take_reply(a.shared);
                ok = got.has_value() && got->numel() == numel;
                if (ok) copy(params, *got);  // a worker unpacks the answer
              } else if (!a.lane.empty()) {
                ok = a.lane.ticket == q.lane_reply && inbox.take(a.lane.ticket).numel() == numel;
              } else {
                if (channel) channel->reply_failed(false);
                ok = a.data.numel() == numel;
              }
            },
            [&](caf::error& e) { die("pull failed: " + describe(e)); });
    if (!ok) die("the pull's answer was not the shard's " + std::to_string(numel) + " floats");
  }
};

int client(const std::string& join, const std::string& tls_dir, const std::string& secret_file, std::int64_t floats,
           int reps, const std::string& shm_tag, bool lane) {
  node_plan plan = plan_for(join, tls_dir, secret_file, false);
  plan.bulk_lanes = lane;
  auto lanes = member_lanes_for(plan);
  if (!lanes) die(lanes.error().message);
  caf::actor_system_config cfg;
  configure_node(cfg, plan);
  caf::actor_system sys{cfg};
  std::set<std::string> sigs;
  auto ptr = connect_to(sys, plan.tls.any(), *plan.join, std::chrono::seconds(30), sigs);
  if (!ptr) die("cannot reach the shard: " + describe(ptr.error()));
  caf::scoped_actor self{sys};
  bench_client c(plan, build_model(block_job(floats))->num_params(), self);
  c.lanes = *lanes;
  c.join(caf::actor_cast<coordinator_actor>(*ptr));
  c.open_channel(shm_tag);
  c.open_lane();
  const std::int64_t numel = c.numel;
  tensor grad({numel});
  for (std::int64_t i = 0; i < numel; ++i) grad.data<float>()[i] = 1e-6f * static_cast<float>(i % 7);
  tensor params({numel});  // where a worker would unpack the answer
  std::vector<double> push_ms, pull_ms;
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms up (and confirms the channel) and is not counted
    const auto t0 = std::chrono::steady_clock::now();
    c.push(grad, r);
    const auto t1 = std::chrono::steady_clock::now();
    c.pull(params, r);
    const auto t2 = std::chrono::steady_clock::now();
    if (r == 0) continue;
    push_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    pull_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  const double mb = static_cast<double>(numel) * 4 / 1e6;
  const double push = median(push_ms), pull = median(pull_ms);
  nlohmann::ordered_json out;
  out["floats"] = numel;
  out["tls"] = plan.tls.any();
  out["shared_memory"] = c.channel && c.channel->confirmed();
  out["lane"] = static_cast<bool>(c.lanes);
  out["reps"] = reps;
  out["push_ms"] = push;
  out["pull_ms"] = pull;
  out["mb_per_s"] = 2 * mb / ((push + pull) / 1000.0);
  std::cout << out.dump() << std::endl;
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Push/pull throughput of one shard across two processes"};
  app.require_subcommand(1);
  std::string listen = "127.0.0.1:0", join, tls_dir, secret_file, shm_tag;
  bool lane = false;
  std::int64_t floats = 10'000'000;
  int reps = 10;
  auto* s = app.add_subcommand("serve", "Run the shard");
  s->add_option("--listen", listen)->capture_default_str();
  auto* c = app.add_subcommand("client", "Time pushes and pulls");
  c->add_option("--join", join)->required();
  c->add_option("--reps", reps)->check(CLI::Range(1, 10000))->capture_default_str();
  for (auto* sub : {s, c}) {
    sub->add_option("--floats", floats)->check(CLI::Range(int64_t{20}, int64_t{1} << 30))->capture_default_str();
    sub->add_option("--tls-dir", tls_dir, "DIR/node.pem and DIR/ca.pem: mutual TLS");
    sub->add_option("--secret-file", secret_file, "The job's secret (without --tls-dir: plain TCP)");
    sub->add_option("--shm-tag", shm_tag, "16 hex digits: the same-host fast path, under this job tag")
        ->check([](const std::string& t) { return shm::valid_tag(t) ? std::string() : "16 lowercase hex digits"; });
    sub->add_flag("--lane", lane, "Move the tensors on a bulk lane beside the messages");
  }
  CLI11_PARSE(app, argc, argv);
  return s->parsed() ? serve(listen, tls_dir, secret_file, floats, shm_tag, lane)
                      : client(join, tls_dir, secret_file, floats, reps, shm_tag, lane);
}
