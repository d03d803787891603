// Tests for actors/checkpoint_writes.hpp: a checkpoint file posted to a writer with room
// is written into its step's directory and reads back; one posted while --checkpoint-queue
// images already wait behind the one being written is refused at once, with an error
// that names the flag, and the writer takes files again once the disk has caught up.
#define BOOST_TEST_MODULE checkpoint_writes
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <thread>

#include "actors/checkpoint_writes.hpp"
#include "tests/support/numeric.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const checkpoint_identity id{"job-w", "mlp:2-2", 4, "sgd"};

std::shared_ptr<const shard_image> image_at(std::int64_t step) {
  auto img = std::make_shared<shard_image>();
  img->step = step;
  img->version = step;
  img->ranges = {{0, 4}};
  img->params = test::filled(4, static_cast<float>(step));
  img->slot1 = test::filled(4, 0.0f);
  return img;
}

checkpoint_saved saved_at(std::int64_t step) { return {0, step, step, shard_file_name(0), {}}; }

// Waits (at most 10 s) until `writer` has nothing waiting or running.
bool drained(const serial_worker& writer) {
  for (int i = 0; i < 1000 && writer.pending() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return writer.pending() == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_file_is_written_into_its_steps_directory) {
  test::temp_dir tmp("ckpt-writes");
  const checkpoint_store store(tmp.path, 4);
  serial_worker writer(2);
  auto saved = saved_at(7);
  BOOST_REQUIRE(post_checkpoint_file(writer, store, caf::actor_addr{}, image_at(7), saved, id));
  BOOST_REQUIRE(drained(writer));
  const auto back = read_shard_image(store.step_dir(7) / shard_file_name(0), id);
  BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  BOOST_TEST(back->version == 7);
  BOOST_TEST(test::same_bits(back->params, test::filled(4, 7.0f)));
}

BOOST_AUTO_TEST_CASE(a_full_queue_skips_the_file_and_says_which_flag_makes_room) {
  test::temp_dir tmp("ckpt-writes-full");
  const checkpoint_store store(tmp.path, 4);
  serial_worker writer(1);           // --checkpoint-queue 1
  std::promise<void> started, disk;  // the first task holds the writer until `disk` is set
  BOOST_REQUIRE(writer.post([&started, done = disk.get_future().share()] {
    started.set_value();
    done.wait_for(std::chrono::seconds(10));
  }));
  BOOST_REQUIRE(started.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto waiting = saved_at(7);
  BOOST_REQUIRE(post_checkpoint_file(writer, store, caf::actor_addr{}, image_at(7), waiting, id));
  BOOST_TEST(waiting.error.empty());
  auto skipped = saved_at(14);
  BOOST_TEST(!post_checkpoint_file(writer, store, caf::actor_addr{}, image_at(14), skipped, id));
  BOOST_TEST(skipped.error.find("skipped: 2 earlier checkpoints are still being written") != std::string::npos,
             skipped.error);
  BOOST_TEST(skipped.error.find("--checkpoint-queue") != std::string::npos, skipped.error);
  disk.set_value();
  BOOST_REQUIRE(drained(writer));
  BOOST_TEST(fs::exists(store.step_dir(7) / shard_file_name(0)));
  BOOST_TEST(!fs::exists(store.step_dir(14)));
  auto later = saved_at(21);
  BOOST_REQUIRE(post_checkpoint_file(writer, store, caf::actor_addr{}, image_at(21), later, id));
  BOOST_REQUIRE(drained(writer));
  BOOST_TEST(fs::exists(store.step_dir(21) / shard_file_name(0)));
}
