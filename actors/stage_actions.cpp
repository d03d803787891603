// stage_actions: carries out what member_core decides (its member_actions): pulls and
// pushes to the shards (over the same-host fast path, a bulk lane or the messages),
// activations and ring pieces to the neighbours, reports to the coordinator, checkpoints,
// the finish and the stop.
#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"
#include "transport/frame_bound.hpp"

namespace troupe::stage_shell {

namespace {

using wall = std::chrono::system_clock;

bool timed_out(const caf::error& e) { return e == caf::sec::request_timeout; }

// Pulls and pushes use the same-host fast path where the shard has one (stage_fast_path.cpp).
// Over the network, large tensors take the member's bulk lane to the shard (stage_lane.cpp).
void pull(stage_pointer self, std::uint32_t s, kv_pull r) {
  const bool lent = offer_reply_slot(self, s, r);
  const std::uint64_t ticket = lent ? 0 : route_on_lane(self, s, r);
  auto answered = [=](kv_pull_reply& p) {
    if (!p.shared.empty()) {
      if (auto taken = take_shared_reply(self, s, p); !taken) {
        drive(self, [&](member_core& c) { return c.on_pull_failed(s, taken.error().message); });
        return;
      }
    } else if (lent) {
      settle_reply_slot(self, s, true, false);
    }
    if (!p.lane.empty() || ticket != 0) return on_lane_reply(self, s, ticket, std::move(p));
    drive(self, [&](member_core& c) { return c.on_params(s, std::move(p)); });
  };
  auto failed = [=](caf::error& e) {
    if (lent) settle_reply_slot(self, s, false, timed_out(e));
    if (ticket != 0 && timed_out(e)) abandon_lane_reply(self, s, ticket);  // its payload may still come
    drive(self, [&](member_core& c) { return c.on_pull_failed(s, describe(e)); });
  };
  if (lent && ring_pull(self, s, r, answered, failed)) return;
  self->request(self->state.shards[s], request_timeout(self), pull_atom::value, std::move(r)).then(answered, failed);
}

void push(stage_pointer self, std::uint32_t s, kv_push g) {
  const auto sent = wall::now();
  const std::int64_t clock = g.clock;
  if (g.piece_numel > 0 && self->state.pushes_pieces.insert(s).second)
    spdlog::info("{}: pushes its gradient to shard {} in pieces, each gradient bucket as backward produces it",
                 who(self), s);
  const bool lent = share_push(self, s, g);
  if (!lent) route_on_lane(self, s, g);
  auto acked = [=](const kv_push_ack& ack) {
    if (lent) settle_push_slot(self, s, false);
    const double secs = std::chrono::duration<double>(wall::now() - sent).count();
    drive(self, [&](member_core& c) { return c.on_push_ack(s, clock, ack, secs); });
  };
  auto failed = [=](caf::error& e) {
    if (lent) settle_push_slot(self, s, timed_out(e));
    drive(self, [&](member_core& c) { return c.on_push_refused(s, clock, describe(e)); });
  };
  if (lent && ring_push(self, s, g, [acked](kv_push_ack& a) { acked(a); }, failed)) return;
  self->request(self->state.shards[s], request_timeout(self), push_atom::value, std::move(g)).then(acked, failed);
}

}  // namespace

// Carries out the actions of one list in order (a `resume` last is left to carry_out).
void carry_out_in_order(stage_pointer self, member_actions_list& actions);

void carry_out(stage_pointer self, member_actions_list actions) {
  auto& st = self->state;
  for (bool resume = true; resume;) {
    resume = !actions.empty() && std::holds_alternative<member_actions::resume>(actions.back());
    carry_out_in_order(self, actions);
    ring_bells(self);  // before any compute that `resume` runs
    if (!resume) break;
    try {
      actions = st.core->on_resume();
    } catch (const std::exception& e) {
      fail(self, {errc::compute_failed, who(self) + ": " + e.what()});
      return;
    }
  }
  if (!st.training && st.core->phase() == member_phase::training) {
    st.training = true;
    start_training(self);
  }
  await_answers(self);  // Note [Waiting for the answers]
}

void carry_out_in_order(stage_pointer self, member_actions_list& actions) {
  auto& st = self->state;
  for (auto& action : actions) {
    std::visit(
        [&](auto& a) {
          using A = std::decay_t<decltype(a)>;
          using namespace member_actions;
          if constexpr (std::is_same_v<A, member_actions::pull>) {
            stage_shell::pull(self, a.shard, a.request);
          } else if constexpr (std::is_same_v<A, member_actions::push>) {
            stage_shell::push(self, a.shard, std::move(a.grads));
          } else if constexpr (std::is_same_v<A, send_activation>) {
            self->send(st.next, activation_atom::value, std::move(a.a));
          } else if constexpr (std::is_same_v<A, send_activation_grad>) {
            self->send(st.prev, act_grad_atom::value, std::move(a.g));
          } else if constexpr (std::is_same_v<A, send_ring_piece>) {
            stage_shell::pass_ring_piece(self, std::move(a.p));
          } else if constexpr (std::is_same_v<A, report_step>) {
            self->send(st.coordinator, progress_atom::value, a.r);
          } else if constexpr (std::is_same_v<A, report_epoch>) {
            self->send(st.coordinator, epoch_atom::value, std::move(a.r));
          } else if constexpr (std::is_same_v<A, send_group_id>) {
            self->send(st.coordinator, group_atom::value, std::move(a.id));
          } else if constexpr (std::is_same_v<A, await_group_id>) {
            self->delayed_send(self, request_timeout(self), group_deadline{});
          } else if constexpr (std::is_same_v<A, schedule_step>) {
            self->send(self, next_step{});
          } else if constexpr (std::is_same_v<A, resume>) {
            // handled below, once everything before it is out
          } else if constexpr (std::is_same_v<A, warn>) {
            spdlog::warn("{}", a.text);
          } else if constexpr (std::is_same_v<A, answer_rows>) {
            self->send(st.coordinator, rows_atom::value, a.a);
          } else if constexpr (std::is_same_v<A, member_actions::save_checkpoint>) {
            stage_shell::save_checkpoint(self, a);
          } else if constexpr (std::is_same_v<A, member_actions::finish>) {
            spdlog::info("{}: done at clock {} ({} of its gradients refused)", who(self), a.r.clock, a.r.rejected);
            if (st.bells && st.bells->taken().answers > 0)
              spdlog::info("{}: took {} answers through its doorbells, {} of them as it waited; its waiter's nudges "
                           "that found none: {}",
                           who(self), st.bells->taken().answers, st.bells->taken().answers_awaited,
                           st.bells->taken().empty_nudges);
            // Its last ring pieces may still wait for mailbox room or for its ring lane to write
            // them (the next replica needs them), and its last checkpoint's file may still be
            // being written.
            after_ring_pieces(self, [self, r = a.r] {
              after_checkpoints(self, [self, r] {
                self->send(self->state.coordinator, done_atom::value, r);
                self->quit();
              });
            });
          } else if constexpr (std::is_same_v<A, member_actions::stop>) {
            fail(self, a.why);
          } else if constexpr (std::is_same_v<A, bound_frames>) {
            set_frame_bound(a.bytes);
          } else {
            static_assert(sizeof(A) == 0, "a member action the stage's shell does not carry out");
          }
        },
        action);
  }
}

}  // namespace troupe::stage_shell
