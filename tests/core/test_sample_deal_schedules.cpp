// Property tests for core/sample_deal.cpp under random schedules: members step, grants
// reach them late, their answers and reports reach the dealer in order, members shed,
// take rows back, are lost (their last word delivered first) and replaced; every position
// of every epoch is trained at most once, and exactly the ones the dealer counts as lost
// or never dealt are not trained.
#define BOOST_TEST_MODULE sample_deal_schedules
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <deque>
#include <random>
#include <map>
#include <variant>

#include "core/sample_deal.hpp"
#include "tests/support/deal_shapes.hpp"

using namespace troupe;
using troupe::test::small_shape;

namespace {

struct sim_member {
  bool live = true, done = false;
  std::int64_t clock = 0;
  member_grants grants{1};
  kept_rows kept;
  std::deque<std::variant<rows_grant, rows_shed>> inbox;  // coordinator -> member
  struct word {
    int kind;
    std::int64_t value, from = 0;
  };
  std::deque<word> outbox;  // member -> coordinator
};

constexpr int report = 0, took = 1, gave_back = 2;

// What the schedules exercised, over all seeds.
struct exercised {
  std::int64_t losses = 0, replacements = 0, grants_taken = 0, grants_returned = 0, trained_extra = 0, sheds = 0,
               raises = 0;
};

void run_schedule(std::uint32_t seed, exercised& seen) {
  std::mt19937 rnd(seed);
  const std::int64_t workers = 2 + rnd() % 4, batch = 1 + rnd() % 4, per_worker = 3 + rnd() % 20,
                     epochs = 1 + rnd() % 4;
  const deal_shape d = small_shape(workers, batch, per_worker, epochs);
  sample_dealer dealer(d, static_cast<std::uint32_t>(workers), 0);
  std::vector<sim_member> members(static_cast<std::size_t>(workers), sim_member{});
  for (auto& m : members) {
    m.grants = member_grants(d.steps_per_epoch);
    m.kept = kept_rows(batch);
  }
  std::map<std::pair<std::int64_t, std::int64_t>, int> trained;  // (epoch, position) -> times
  std::map<std::uint64_t, std::uint32_t> holder;

  auto flush = [&](std::uint32_t r) {  // the member's messages reach the dealer, in order
    auto& m = members[r];
    while (!m.outbox.empty()) {
      auto [kind, value, from] = m.outbox.front();
      m.outbox.pop_front();
      if (kind == report) {
        dealer.reported(r, value);
      } else {
        dealer.answered(r, static_cast<std::uint64_t>(value), kind == took, from);
        ++(kind == took ? seen.grants_taken : seen.grants_returned);
      }
    }
  };
  auto deal = [&] {
    for (auto& [rank, g] : dealer.deal()) members[rank].inbox.push_back(std::move(g));
  };
  // A message reaches member m: a grant is taken or returned, a shed applies from its
  // next step (as member_core does).
  auto receive = [&](sim_member& m) {
    auto msg = std::move(m.inbox.front());
    m.inbox.pop_front();
    if (auto* g = std::get_if<rows_grant>(&msg)) {
      const std::uint64_t id = g->id;
      m.outbox.push_back({m.grants.take(std::move(*g), m.clock) ? took : gave_back, static_cast<std::int64_t>(id)});
    } else {
      const auto& shed = std::get<rows_shed>(msg);
      const std::int64_t from = std::max(m.clock + 1, shed.not_before);
      m.kept.set(from, shed.keep);
      m.outbox.push_back({took, static_cast<std::int64_t>(shed.id), from});
    }
  };
  // Member m trains its step: its kept rows and its granted ones.
  auto train = [&](std::uint32_t r, sim_member& m) {
    std::vector<std::int64_t> rows;
    static_positions(d, r, m.clock, rows, 0, m.kept.at(m.clock));
    const auto extra = m.grants.rows_at(m.clock);
    rows.insert(rows.end(), extra.begin(), extra.end());
    BOOST_TEST_REQUIRE(static_cast<std::int64_t>(extra.size()) <= d.max_extra_rows);
    seen.trained_extra += static_cast<std::int64_t>(extra.size());
    for (std::int64_t p : rows) ++trained[{m.clock / d.steps_per_epoch, p}];
    ++m.clock;
    m.outbox.push_back({report, m.clock});
  };

  for (int event = 0; event < 4000; ++event) {
    const std::uint32_t r = rnd() % static_cast<std::uint32_t>(workers);
    sim_member& m = members[r];
    const int what = static_cast<int>(rnd() % 100);
    if (!m.live) {
      if (what < 3) {  // a replacement, wanting a clock near the others'
        std::int64_t want = 0;
        for (auto& o : members)
          if (o.live) want = std::max(want, o.clock);
        ++seen.replacements;
        m = sim_member{};
        m.grants = member_grants(d.steps_per_epoch);
        m.kept = kept_rows(batch);
        m.clock = dealer.replace(r, want);
        m.done = m.clock >= d.total_steps;
        if (m.done) dealer.done(r);
        deal();
      }
      continue;
    }
    if (m.done) continue;
    if (what < 55) {  // a step
      train(r, m);
      if (m.clock == d.total_steps) {
        m.done = true;
        flush(r);
        dealer.done(r);
        deal();
      }
    } else if (what < 80 && !m.inbox.empty()) {  // a grant or shed arrives
      receive(m);
    } else if (what < 97) {  // the coordinator hears from the member, may shed, and deals
      flush(r);
      if (what >= 85 && batch > 1) {
        const std::int64_t keep = 1 + static_cast<std::int64_t>(rnd() % static_cast<std::uint32_t>(batch));
        const std::int64_t before = dealer.keeps(r);
        if (auto shed = dealer.shed(r, keep)) {
          ++(keep < before ? seen.sheds : seen.raises);
          m.inbox.push_back(*shed);
        }
      }
      deal();
    } else if (what < 99 || rnd() % 4 == 0) {  // the member is lost
      flush(r);
      ++seen.losses;
      m.live = false;
      m.inbox.clear();
      dealer.lost(r);
      deal();
    }
  }
  // Everyone still alive runs to the end, hearing everything.
  for (bool moved = true; moved;) {
    moved = false;
    for (std::uint32_t r = 0; r < members.size(); ++r) {
      sim_member& m = members[r];
      if (!m.live || m.done) continue;
      while (!m.inbox.empty()) receive(m);
      train(r, m);
      if (m.clock == d.total_steps) m.done = true;
      flush(r);
      if (m.done) dealer.done(r);
      deal();
      moved = true;
    }
  }
  deal();
  std::int64_t twice = 0, once = 0;
  for (const auto& [where, times] : trained) {
    twice += times > 1;
    once += times == 1;
  }
  const std::int64_t all = epochs * workers * per_worker;
  BOOST_TEST(twice == 0, "seed " << seed);
  BOOST_TEST(once + dealer.lost_positions() + dealer.never_dealt() == all,
             "seed " << seed << ": trained " << once << ", lost " << dealer.lost_positions() << ", never dealt "
                     << dealer.never_dealt() << " of " << all);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_position_is_trained_once_or_counted_under_random_schedules) {
  exercised seen;
  for (std::uint32_t seed = 1; seed <= 300; ++seed) run_schedule(seed, seen);
  BOOST_TEST_MESSAGE(seen.losses << " losses, " << seen.replacements << " replacements, " << seen.grants_taken
                                 << " grants taken, " << seen.grants_returned << " returned, " << seen.trained_extra
                                 << " extra rows trained, " << seen.sheds << " sheds, " << seen.raises << " raises");
  // The schedules reach every path: none of these may be rare.
  BOOST_TEST(seen.losses > 200);
  BOOST_TEST(seen.replacements > 100);
  BOOST_TEST(seen.grants_taken > 200);
  BOOST_TEST(seen.grants_returned > 100);
  BOOST_TEST(seen.trained_extra > 800);
  BOOST_TEST(seen.sheds > 200);
  BOOST_TEST(seen.raises > 30);
}
