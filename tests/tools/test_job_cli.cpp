// Tests for tools/job_cli.cpp's account of what the shards make of the optimizer: the
// capped sync lr past the critical batch, how many gradients close a round with backup
// workers, the momentum --async-rule uses for N workers, whether shares are balanced, and
// nothing where nothing changes; and how --batch-size resolves.
#define BOOST_TEST_MODULE job_cli
#include <boost/test/unit_test.hpp>

#include "tools/job_cli.hpp"

using namespace troupe;
using namespace troupe::cli;

namespace {

job_spec four_workers(sync_mode mode) {
  job_spec j;
  j.mode = mode;
  j.workers = 4;
  j.train_size = 60000;
  j.train.batch_size = 128;
  return j;
}

bool says(const std::string& text, const std::string& part) {
  BOOST_TEST_INFO("text: " << text);
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sync_past_the_critical_batch_names_the_lr_and_the_warm_up) {
  const std::string s = describe_update_rules(four_workers(sync_mode::sync));  // 512 samples, cap 256
  BOOST_TEST(says(s, "past --critical-batch 256 the shards use lr 0.025 per worker batch"));
  BOOST_TEST(says(s, "warmed up over 118 rounds"));  // 0.5 of 118 steps an epoch, doubled
  job_spec two = four_workers(sync_mode::sync);
  two.workers = 2;  // 256 samples: linear scaling, nothing to say
  BOOST_TEST(describe_update_rules(two).empty());
}

BOOST_AUTO_TEST_CASE(sync_with_backup_workers_says_how_many_gradients_close_a_round) {
  job_spec j = four_workers(sync_mode::sync);
  j.backup_workers = 1;
  BOOST_TEST(says(describe_update_rules(j), "a round closes with the first 3 of 4 gradients (--backup-workers 1)"));
}

BOOST_AUTO_TEST_CASE(ssp_says_when_a_straggler_leaves_the_bound) {
  job_spec j = four_workers(sync_mode::ssp);
  BOOST_TEST(says(describe_update_rules(j), "a worker whose steps compute over 2x the median leaves the bound"));
  j.straggler_factor = 0.0;
  BOOST_TEST(!says(describe_update_rules(j), "straggler"));
  BOOST_TEST(!says(describe_update_rules(four_workers(sync_mode::async)), "straggler"));
}

BOOST_AUTO_TEST_CASE(async_names_the_rule_and_the_momentum_it_uses) {
  BOOST_TEST(says(describe_update_rules(four_workers(sync_mode::async)),
                  "--async-rule dana: the shards keep each worker's own momentum 0.9 and the parameters a step "
                  "ahead, each push stepping 1/4 of the lr"));
  job_spec plain = four_workers(sync_mode::async);
  plain.train.optimizer.momentum = 0.f;  // dana steps as the momentum rule does then
  BOOST_TEST(says(describe_update_rules(plain), "--async-rule dana: the shards use momentum 0 and 0.25 x the lr"));
  job_spec shared = four_workers(sync_mode::async);
  shared.async_correction = async_rule::momentum;
  BOOST_TEST(says(describe_update_rules(shared),
                  "--async-rule momentum: the shards use momentum 0.6 for 4 asynchronous workers"));
  job_spec many = four_workers(sync_mode::ssp);
  many.workers = 16;
  many.async_correction = async_rule::dcasgd;
  const std::string s = describe_update_rules(many);
  BOOST_TEST(says(s, "--async-rule dcasgd (lambda 0.04): the shards use momentum 0 and 0.625 x the lr"));
  // Note [Warm-up of asynchrony]: 30 steps an epoch, half an epoch doubled for 16 workers.
  BOOST_TEST(says(s, "for 16 asynchronous workers, warmed up over 30 steps"), s);
  BOOST_TEST(!says(describe_update_rules(four_workers(sync_mode::async)), "warmed up"));
}

BOOST_AUTO_TEST_CASE(async_and_ssp_say_that_they_balance_shares_and_sync_only_when_asked) {
  const std::string balances = "trains fewer of its samples and they the rest (--share-balance)";
  BOOST_TEST(says(describe_update_rules(four_workers(sync_mode::async)), balances));
  BOOST_TEST(says(describe_update_rules(four_workers(sync_mode::ssp)), balances));
  job_spec sync = four_workers(sync_mode::sync);
  BOOST_TEST(!says(describe_update_rules(sync), balances));
  sync.balance_shares = share_balance::on;
  BOOST_TEST(says(describe_update_rules(sync), balances));
  job_spec off = four_workers(sync_mode::async);
  off.balance_shares = share_balance::off;
  BOOST_TEST(!says(describe_update_rules(off), balances));
}

// --batch-size auto (the default) resolves with the mode and the workers; a number is
// each worker's batch at the lr as given.
BOOST_AUTO_TEST_CASE(the_batch_flag_resolves_with_the_mode_and_the_workers) {
  job_cli_options o;
  o.job.workers = 16;
  o.mode = "sync";
  auto job = resolve_job_options(o);
  BOOST_TEST_REQUIRE(job.has_value());
  BOOST_TEST(job->train.batch_size == 16);
  BOOST_TEST(job->train.lr == 0.05f * 0.125f);
  BOOST_TEST(job->batch_auto);
  o.mode = "async";
  job = resolve_job_options(o);
  BOOST_TEST_REQUIRE(job.has_value());
  BOOST_TEST(job->train.batch_size == 4);  // 64 across past 8 workers, at the same lr per sample
  BOOST_TEST(job->train.lr == 0.05f * 0.5f);
  o.train.batch_size = "100";
  job = resolve_job_options(o);
  BOOST_TEST_REQUIRE(job.has_value());
  BOOST_TEST(job->train.batch_size == 100);
  BOOST_TEST(job->train.lr == 0.05f);
  BOOST_TEST(!job->batch_auto);
}

BOOST_AUTO_TEST_CASE(nothing_is_said_where_nothing_changes) {
  job_spec none = four_workers(sync_mode::async);
  none.async_correction = async_rule::none;
  none.balance_shares = share_balance::off;
  BOOST_TEST(describe_update_rules(none).empty());
  job_spec adam = four_workers(sync_mode::async);
  adam.train.optimizer.kind = optimizer_kind::adam;
  adam.balance_shares = share_balance::off;
  BOOST_TEST(describe_update_rules(adam).empty());
  job_spec kv = four_workers(sync_mode::async);
  kv.kv = true;
  BOOST_TEST(describe_update_rules(kv).empty());
}
