// thread_mail: how a thread of Troupe's own (a bulk lane's reader, a checkpoint writer)
// tells the actor it works for what happened: by local messages (Note [Type IDs and local
// triggers]) through a handle that does not keep the actor alive, so a message to an
// actor that is gone is dropped.
#pragma once

#include <caf/all.hpp>

#include <utility>

namespace troupe {

inline auto thread_mail(caf::actor_addr addr) {
  return [addr](auto msg) {
    if (auto a = caf::actor_cast<caf::actor>(addr)) caf::anon_send(a, std::move(msg));
  };
}

}  // namespace troupe
