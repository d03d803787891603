// bench_checkpoint: writes and reads a checkpoint-sized tensor file (Note [Tensor files]):
// parameters and optimizer state of MB megabytes in all, in two sections, durably (Note
// [Durable replace]: temporary, fsync, rename, directory fsync) with CRC-32C over every
// byte; REPS repetitions, each time printed in milliseconds as one JSON line per rep:
// {"write_ms", "read_ms", "bytes"}. tools/bench/checkpoint times `dd conv=fsync` of the
// same bytes in the same directory between the reps and reports the ratio.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

#include "base/crc32c.hpp"
#include "tensor/tensor_file.hpp"

using namespace troupe;

int main(int argc, char** argv) {
  CLI::App app{"Write and read a checkpoint-sized Troupe tensor file"};
  std::string dir;
  int mb = 100, reps = 1;
  app.add_option("--dir", dir, "Directory to write in")->required();
  app.add_option("--mb", mb, "Megabytes in all (parameters and optimizer state, half each)")->check(CLI::Range(2, 100000));
  app.add_option("--reps", reps, "Repetitions")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  const std::int64_t half = static_cast<std::int64_t>(mb) * 1000000 / 8;  // floats per section
  tensor params = tensor::uninitialized({half}), velocity = tensor::uninitialized({half});
  for (std::int64_t i = 0; i < half; ++i) {
    params.data<float>()[i] = 1e-3f * static_cast<float>(i % 9973);
    velocity.data<float>()[i] = -1e-4f * static_cast<float>(i % 7919);
  }
  const auto path = std::filesystem::path(dir) / "bench-checkpoint.tf";
  std::cerr << "bench_checkpoint: " << 2 * params.nbytes() / 1000000 << " MB in " << dir
            << (crc32c_in_hardware() ? " (CRC-32C in hardware)" : " (CRC-32C by tables)") << "\n";
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto why = write_tensor_file(path, "bench-checkpoint", {{"rep", r}},
                                     {{"params", params.view()}, {"velocity", velocity.view()}})) {
      std::cerr << *why << "\n";
      return 1;
    }
    const auto t1 = std::chrono::steady_clock::now();
    auto back = read_tensor_file(path, "bench-checkpoint");
    const auto t2 = std::chrono::steady_clock::now();
    if (!back) {
      std::cerr << back.error().message << "\n";
      return 1;
    }
    nlohmann::ordered_json out;
    out["write_ms"] = std::chrono::duration<double, std::milli>(t1 - t0).count();
    out["read_ms"] = std::chrono::duration<double, std::milli>(t2 - t1).count();
    out["bytes"] = 2 * params.nbytes();
    std::cout << out.dump() << std::endl;
  }
  std::filesystem::remove(path);
  return 0;
}
