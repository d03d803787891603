// Tests for client/environment_join.cpp: TROUPE_WORKER_INDEX unset, empty, a rank, or
// refused by name; a store asked to join a launched job without TROUPE_COORDINATOR,
// without TROUPE_JOB_ID, or without TLS or a secret is refused with what to do, before
// anything is started. (Joining a real launched job: tests/client/python/test_launch.py.)
#define BOOST_TEST_MODULE environment_join
#include <boost/test/unit_test.hpp>

#include "client/environment_join.hpp"

using namespace troupe;
using namespace troupe::kv;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string refusal(const or_fault<std::unique_ptr<kv_transport>>& r) {
  const auto* f = std::get_if<fault>(&r);
  BOOST_REQUIRE(f);
  BOOST_TEST((f->code == errc::bad_job));
  return f->detail;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_worker_index_is_a_rank_or_refused_naming_it) {
  BOOST_TEST(std::get<std::int32_t>(worker_index({})) == -1);
  BOOST_TEST(std::get<std::int32_t>(worker_index({{"TROUPE_WORKER_INDEX", ""}})) == -1);
  BOOST_TEST(std::get<std::int32_t>(worker_index({{"TROUPE_WORKER_INDEX", "3"}})) == 3);
  for (const std::string bad : {"first", "-1", "3x", " 3", "99999999999"}) {
    BOOST_TEST_CONTEXT(bad) {
      const auto r = worker_index({{"TROUPE_WORKER_INDEX", bad}});
      const auto* f = std::get_if<fault>(&r);
      BOOST_REQUIRE(f);
      BOOST_TEST((f->code == errc::bad_job));
      BOOST_TEST(has(f->detail, "TROUPE_WORKER_INDEX is \"" + bad + "\""), f->detail);
      BOOST_TEST(has(f->detail, "`troupe launch` sets it, or unset it"), f->detail);
    }
  }
}

BOOST_AUTO_TEST_CASE(what_the_environment_lacks_is_refused_with_what_to_do) {
  const std::string no_coordinator = refusal(join_from_environment({}, "dist_sync"));
  BOOST_TEST(has(no_coordinator, "type dist_sync joins the job that `troupe launch` started, but TROUPE_COORDINATOR "
                                 "is not set"),
             no_coordinator);
  BOOST_TEST(has(no_coordinator, "troupe launch --local --workers N -- COMMAND"), no_coordinator);
  const std::string no_job = refusal(join_from_environment({{"TROUPE_COORDINATOR", "127.0.0.1:1"}}, "dist"));
  BOOST_TEST(has(no_job, "TROUPE_JOB_ID is not set"), no_job);
  const std::string no_tls =
      refusal(join_from_environment({{"TROUPE_COORDINATOR", "127.0.0.1:1"}, {"TROUPE_JOB_ID", "j"}}, "dist"));
  BOOST_TEST(has(no_tls, "the TROUPE_* environment is not usable: this node has no TLS certificate"), no_tls);
  const std::string no_secret = refusal(join_from_environment(
      {{"TROUPE_COORDINATOR", "127.0.0.1:1"}, {"TROUPE_JOB_ID", "j"}, {"TROUPE_INSECURE_NETWORK", "1"}}, "dist"));
  BOOST_TEST(has(no_secret, "this node has no job secret"), no_secret);
}
