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

// One random schedule: the dealer, its members, and what each position was trained.
class schedule {
 public:
  schedule(std::uint32_t seed, exercised& seen)
      : seed_(seed), rnd_(seed), workers_(2 + rnd_() % 4), batch_(1 + rnd_() % 4), per_worker_(3 + rnd_() % 20),
        epochs_(1 + rnd_() % 4), d_(small_shape(workers_, batch_, per_worker_, epochs_)),
        dealer_(d_, static_cast<std::uint32_t>(workers_), 0), members_(static_cast<std::size_t>(workers_)), seen_(seen) {
    for (auto& m : members_) fresh(m);
  }

  // 4000 random events, then everyone still alive runs to the end, hearing everything.
  void run() {
    for (int event = 0; event < 4000; ++event) one_event();
    for (bool moved = true; moved;) {
      moved = false;
      for (std::uint32_t r = 0; r < members_.size(); ++r) {
        sim_member& m = members_[r];
        if (!m.live || m.done) continue;
        while (!m.inbox.empty()) receive(m);
        train(r, m);
        if (m.clock == d_.total_steps) m.done = true;
        flush(r);
        if (m.done) dealer_.done(r);
        deal();
        moved = true;
      }
    }
    deal();
  }

  void check() const {
    std::int64_t twice = 0, once = 0;
    for (const auto& [where, times] : trained_) {
      twice += times > 1;
      once += times == 1;
    }
    const std::int64_t all = epochs_ * workers_ * per_worker_;
    BOOST_TEST(twice == 0, "seed " << seed_);
    BOOST_TEST(once + dealer_.lost_positions() + dealer_.never_dealt() == all,
               "seed " << seed_ << ": trained " << once << ", lost " << dealer_.lost_positions() << ", never dealt "
                       << dealer_.never_dealt() << " of " << all);
  }

 private:
  void fresh(sim_member& m) const {
    m = sim_member{};
    m.grants = member_grants(d_.steps_per_epoch);
    m.kept = kept_rows(batch_);
  }

  void one_event() {
    const std::uint32_t r = rnd_() % static_cast<std::uint32_t>(workers_);
    sim_member& m = members_[r];
    const int what = static_cast<int>(rnd_() % 100);
    if (!m.live) {
      if (what < 3) replace(r, m);
      return;
    }
    if (m.done) return;
    if (what < 55) {  // a step
      train(r, m);
      if (m.clock == d_.total_steps) {
        m.done = true;
        flush(r);
        dealer_.done(r);
        deal();
      }
    } else if (what < 80 && !m.inbox.empty()) {  // a grant or shed arrives
      receive(m);
    } else if (what < 97) {  // the coordinator hears from the member, may shed, and deals
      flush(r);
      if (what >= 85 && batch_ > 1) maybe_shed(r, m);
      deal();
    } else if (what < 99 || rnd_() % 4 == 0) {  // the member is lost
      flush(r);
      ++seen_.losses;
      m.live = false;
      m.inbox.clear();
      dealer_.lost(r);
      deal();
    }
  }

  // A replacement, wanting a clock near the others'.
  void replace(std::uint32_t r, sim_member& m) {
    std::int64_t want = 0;
    for (auto& o : members_)
      if (o.live) want = std::max(want, o.clock);
    ++seen_.replacements;
    fresh(m);
    m.clock = dealer_.replace(r, want);
    m.done = m.clock >= d_.total_steps;
    if (m.done) dealer_.done(r);
    deal();
  }

  void maybe_shed(std::uint32_t r, sim_member& m) {
    const std::int64_t keep = 1 + static_cast<std::int64_t>(rnd_() % static_cast<std::uint32_t>(batch_));
    const std::int64_t before = dealer_.keeps(r);
    if (auto shed = dealer_.shed(r, keep)) {
      ++(keep < before ? seen_.sheds : seen_.raises);
      m.inbox.push_back(*shed);
    }
  }

  // The member's messages reach the dealer, in order.
  void flush(std::uint32_t r) {
    auto& m = members_[r];
    while (!m.outbox.empty()) {
      auto [kind, value, from] = m.outbox.front();
      m.outbox.pop_front();
      if (kind == report) {
        dealer_.reported(r, value);
      } else {
        dealer_.answered(r, static_cast<std::uint64_t>(value), kind == took, from);
        ++(kind == took ? seen_.grants_taken : seen_.grants_returned);
      }
    }
  }

  void deal() {
    for (auto& [rank, g] : dealer_.deal()) members_[rank].inbox.push_back(std::move(g));
  }

  // A message reaches member m: a grant is taken or returned, a shed applies from its
  // next step (as member_core does).
  void receive(sim_member& m) {
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
  }

  // Member m trains its step: its kept rows and its granted ones.
  void train(std::uint32_t r, sim_member& m) {
    std::vector<std::int64_t> rows;
    static_positions(d_, r, m.clock, rows, 0, m.kept.at(m.clock));
    const auto extra = m.grants.rows_at(m.clock);
    rows.insert(rows.end(), extra.begin(), extra.end());
    BOOST_TEST_REQUIRE(static_cast<std::int64_t>(extra.size()) <= d_.max_extra_rows);
    seen_.trained_extra += static_cast<std::int64_t>(extra.size());
    for (std::int64_t p : rows) ++trained_[{m.clock / d_.steps_per_epoch, p}];
    ++m.clock;
    m.outbox.push_back({report, m.clock});
  }

  std::uint32_t seed_;
  std::mt19937 rnd_;
  std::int64_t workers_, batch_, per_worker_, epochs_;
  deal_shape d_;
  sample_dealer dealer_;
  std::vector<sim_member> members_;
  exercised& seen_;
  std::map<std::pair<std::int64_t, std::int64_t>, int> trained_;  // (epoch, position) -> times
};

void run_schedule(std::uint32_t seed, exercised& seen) {
  schedule s(seed, seen);
  s.run();
  s.check();
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
