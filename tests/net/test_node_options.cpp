// Tests for net/node_options.cpp: TROUPE_* variables fill what flags left unset, Slurm
// assigns roles and expands host lists, and the security posture is enforced: every node,
// on loopback too, needs TLS or an explicit --insecure-network, and the job's secret; bulk
// lanes are on unless turned off, and a bad lane port or worker index is named.
#define BOOST_TEST_MODULE node_options
#include <boost/test/unit_test.hpp>

#include "net/job_secret.hpp"
#include "net/node_options.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;

namespace {

// The message resolve_node_options refuses `o` with; empty when it accepts it.
std::string refusal_of(const node_options& o) {
  auto p = resolve_node_options(o);
  return p ? std::string() : p.error().message;
}

// A job's secret in a temporary directory.
struct secret_fixture {
  test::temp_dir dir{"node-options"};
  std::string file = dir.file("job.secret");
  secret_fixture() { BOOST_REQUIRE(create_job_secret(file).has_value()); }
  // A plain node of `role` joining a coordinator on loopback, that resolves.
  node_options joining(node_role role) const {
    node_options o;
    o.role = role;
    o.join = "127.0.0.1:7070";
    o.insecure_network = true;
    o.secret_file = file;
    return o;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(environment_fills_unset_fields_only) {
  node_options o;
  o.join = "10.0.0.9:7070";
  apply_environment(o, {{"TROUPE_ROLE", "worker"}, {"TROUPE_COORDINATOR", "10.0.0.1:7070"}, {"TROUPE_JOB_ID", "j1"},
                        {"TROUPE_TLS_DIR", "/etc/troupe"}, {"TROUPE_INSECURE_NETWORK", "1"}});
  BOOST_TEST((o.role == node_role::worker));
  BOOST_TEST(o.join == "10.0.0.9:7070");  // the flag wins
  BOOST_TEST(o.job_id == "j1");
  BOOST_TEST(o.tls_dir == "/etc/troupe");
  BOOST_TEST(o.insecure_network);
}

BOOST_AUTO_TEST_CASE(slurm_host_lists_expand) {
  auto h = expand_slurm_nodelist("gpu[01-03,07],cpu5");
  BOOST_REQUIRE(h.has_value());
  BOOST_TEST(*h == (std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu07", "cpu5"}));
  BOOST_TEST(expand_slurm_nodelist("n[9-11]")->at(2) == "n11");
  BOOST_TEST(!expand_slurm_nodelist("n[3-1]").has_value());
  BOOST_TEST(!expand_slurm_nodelist("n[1-").has_value());
}

BOOST_AUTO_TEST_CASE(slurm_assigns_roles_by_task) {
  auto role_of = [](const char* procid) {
    node_options o;
    o.slurm = true;
    o.slurm_servers = 2;
    auto ok = apply_slurm(o, {{"SLURM_PROCID", procid}, {"SLURM_NTASKS", "6"}, {"SLURM_NODELIST", "a[1-3]"},
                              {"SLURM_JOB_ID", "42"}});
    BOOST_REQUIRE(ok.has_value());
    BOOST_TEST(o.join == "a1:7070");
    BOOST_TEST(o.job_id == "slurm-42");
    return *o.role;
  };
  BOOST_TEST((role_of("0") == node_role::coordinator));
  BOOST_TEST((role_of("2") == node_role::server));
  BOOST_TEST((role_of("3") == node_role::worker));
  node_options o;
  o.slurm = true;
  auto missing = apply_slurm(o, {});
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message.find("srun") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(without_tls_every_node_is_refused_unless_insecure_network_is_asked_for, secret_fixture) {
  for (const char* listen : {"0.0.0.0:0", "127.0.0.1:0"}) {
    node_options o;
    o.role = node_role::coordinator;
    o.listen = listen;
    o.secret_file = file;
    const std::string m = refusal_of(o);
    BOOST_TEST(m.find("no TLS certificate") != std::string::npos, m);
    BOOST_TEST(m.find("--insecure-network") != std::string::npos);
    BOOST_TEST(m.find("troupe tls init") != std::string::npos);
    o.insecure_network = true;
    BOOST_TEST(resolve_node_options(o).has_value());
  }
  node_options w;
  w.role = node_role::worker;
  w.secret_file = file;
  for (const char* join : {"10.1.2.3:7070", "127.0.0.1:7070"}) {
    w.join = join;
    BOOST_TEST(!resolve_node_options(w).has_value());
  }
}

BOOST_FIXTURE_TEST_CASE(every_node_needs_the_job_s_secret, secret_fixture) {
  node_options o;
  o.role = node_role::worker;
  o.join = "127.0.0.1:7070";
  o.insecure_network = true;
  const std::string m = refusal_of(o);
  BOOST_TEST(m.find("no job secret") != std::string::npos, m);
  BOOST_TEST(m.find("--secret-file") != std::string::npos);
  BOOST_TEST(m.find("troupe tls secret") != std::string::npos);
  o.secret_file = file;
  BOOST_TEST(resolve_node_options(o)->secret.size() == 64u);
  o.secret_file = dir.file("missing.secret");
  BOOST_TEST(!resolve_node_options(o).has_value());
}

BOOST_FIXTURE_TEST_CASE(missing_pieces_are_named, secret_fixture) {
  node_options o;
  o.secret_file = file;
  BOOST_TEST(resolve_node_options(o).error().message.find("--role") != std::string::npos);
  o.role = node_role::server;
  BOOST_TEST(resolve_node_options(o).error().message.find("--join") != std::string::npos);
  o.join = "127.0.0.1:7070";
  o.listen = "0.0.0.0:0";
  o.insecure_network = true;
  BOOST_TEST(resolve_node_options(o).error().message.find("--advertise") != std::string::npos);
  o.advertise = "10.0.0.2";
  BOOST_TEST(resolve_node_options(o)->advertise == "10.0.0.2");
  node_options t;
  t.role = node_role::coordinator;
  t.tls.certificate = "/nonexistent.pem";
  auto p = resolve_node_options(t);
  BOOST_REQUIRE(!p.has_value());
  BOOST_TEST(p.error().message.find("TLS preflight failed") != std::string::npos);
}

// Note [Doorbells]: TROUPE_DOORBELLS=0 (launch --no-doorbells, for a user's worker
// command) turns them off like --no-doorbells; anything else leaves them on.
BOOST_FIXTURE_TEST_CASE(doorbells_from_the_environment, secret_fixture) {
  node_options o = joining(node_role::worker);
  auto p = resolve_node_options(o);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST(p->doorbells);
  node_options on = o;
  apply_environment(on, {{"TROUPE_DOORBELLS", "1"}});
  BOOST_TEST(resolve_node_options(on)->doorbells);
  apply_environment(o, {{"TROUPE_DOORBELLS", "0"}});
  p = resolve_node_options(o);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST(!p->doorbells);
}

// Note [Bulk lanes]: TROUPE_BULK_LANES=0 turns them off like --no-bulk-lanes, and a lane
// port that is not a port is named, from the flag or the environment.
BOOST_FIXTURE_TEST_CASE(bulk_lanes_and_their_port, secret_fixture) {
  node_options o = joining(node_role::server);
  auto p = resolve_node_options(o);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST(p->bulk_lanes);
  BOOST_TEST(p->lane_port == 0);
  apply_environment(o, {{"TROUPE_BULK_LANES", "0"}, {"TROUPE_LANE_PORT", "7600"}});
  p = resolve_node_options(o);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST(!p->bulk_lanes);
  BOOST_TEST(p->lane_port == 7600);
  for (const char* bad : {"70000", "seven", "-1", "80x"}) {
    node_options b = o;
    b.lane_port_text = bad;
    const std::string m = refusal_of(b);
    BOOST_TEST(m.find("TROUPE_LANE_PORT") != std::string::npos, m);
    BOOST_TEST(m.find(std::string("'") + bad + "'") != std::string::npos, m);
  }
}

// A worker asks for a rank (worker_join::wanted_rank) by --worker-index, by
// TROUPE_WORKER_INDEX, or under Slurm by its task's place among the workers; anything
// that is not a rank is named.
BOOST_FIXTURE_TEST_CASE(a_worker_asks_for_its_index_as_its_rank, secret_fixture) {
  node_options o = joining(node_role::worker);
  auto p = resolve_node_options(o);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST(p->wanted_rank == -1);
  apply_environment(o, {{"TROUPE_WORKER_INDEX", "3"}});
  p = resolve_node_options(o);
  BOOST_REQUIRE(p.has_value());
  BOOST_TEST(p->wanted_rank == 3);
  for (const char* bad : {"-1", "three", "2x", "99999999999"}) {
    node_options b = o;
    b.worker_index_text = bad;
    const std::string m = refusal_of(b);
    BOOST_TEST(m.find("--worker-index") != std::string::npos, m);
    BOOST_TEST(m.find(std::string("'") + bad + "'") != std::string::npos, m);
  }
  node_options s;
  s.slurm = true;
  s.slurm_servers = 2;
  BOOST_REQUIRE(apply_slurm(s, {{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "6"}, {"SLURM_NODELIST", "a[1-3]"}}).has_value());
  BOOST_TEST(s.worker_index_text == "1");  // tasks 3, 4, 5 are workers 0, 1, 2
}
