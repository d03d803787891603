// checkpoint_writes: how an actor that writes a checkpoint file (a shard server, or a
// member that holds the parameters) hands it to its writer thread, and what it reports
// when the thread is too far behind to take it.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/protocol.hpp"
#include "actors/thread_mail.hpp"
#include "base/serial_worker.hpp"
#include "core/checkpoint_store.hpp"
#include "core/shard_checkpoint.hpp"

namespace troupe {

// Writes a checkpoint's file at the path given; why not.
using checkpoint_file_writer = std::function<std::optional<std::string>(const std::filesystem::path&)>;

// Queues the file `saved` names on `writer`: written by `write` into checkpoint
// `saved.step`'s directory of `store`, then `owner` is told with a checkpoint_written
// (error: why not). False when the writer had no room (its capacity is --checkpoint-queue:
// a disk slower than the checkpoints cannot pile images up in memory); `saved.error` then
// says so, for the caller to report.
inline bool post_checkpoint_file(serial_worker& writer, const checkpoint_store& store, caf::actor_addr owner,
                                 checkpoint_file_writer write, checkpoint_saved& saved) {
  auto tell = thread_mail(std::move(owner));
  if (writer.post([=, saved = saved]() mutable {
        if (auto d = store.begin(saved.step); !d)
          saved.error = d.error().message;
        else if (auto why = write(*d / saved.file))
          saved.error = *why;
        tell(checkpoint_written{std::move(saved)});
      }))
    return true;
  saved.error = "skipped: " + std::to_string(writer.capacity() + 1) +
                " earlier checkpoints are still being written (the disk is slower than the checkpoints are due; "
                "--checkpoint-queue lets more wait)";
  return false;
}

// The same for a shard's (or stage's) image of a training job.
inline bool post_checkpoint_file(serial_worker& writer, const checkpoint_store& store, caf::actor_addr owner,
                                 std::shared_ptr<const shard_image> image, checkpoint_saved& saved,
                                 checkpoint_identity id) {
  return post_checkpoint_file(
      writer, store, std::move(owner),
      [image = std::move(image), id = std::move(id)](const std::filesystem::path& at) {
        return write_shard_image(at, *image, id);
      },
      saved);
}

}  // namespace troupe
