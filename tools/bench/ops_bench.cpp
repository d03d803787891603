// bench_ops: time each backend op on one device (cpu, cuda, cuda:N) and print the time per
// call and the achieved TFLOP/s or GB/s next to the device's peak (from its clock, SM count
// and memory bus; unknown for the CPU). Exits 3 with the reason when the device cannot be
// opened. Ends with one JSON line: {"device", "name", "ops": [{"op", "ms", "tflops"|"gbs", ...}]}.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>

#include "tensor/backend.hpp"
#include "tensor/random.hpp"

namespace {

using namespace troupe;

struct buffer {
  const backend_context& b;
  void* p = nullptr;
  buffer(const backend_context& ctx, std::size_t bytes, std::uint64_t seed) : b(ctx) {
    b.call("alloc", &troupe_backend_v1::alloc, bytes, &p);
    std::vector<float> host(bytes / sizeof(float));
    rng r(seed);
    for (auto& v : host) v = r.uniform(-1.f, 1.f);
    b.call("upload", &troupe_backend_v1::upload, p, static_cast<const void*>(host.data()), host.size() * sizeof(float));
  }
  ~buffer() { (void)b.table().release(b.handle(), p); }
  float* f() const { return static_cast<float*>(p); }
  std::int32_t* i() const { return static_cast<std::int32_t*>(p); }
};

// Median-free simple timing: `reps` calls after one warm-up, synchronised at both ends.
double time_ms(const backend_context& b, int reps, const std::function<void()>& op) {
  op();
  b.call("synchronize", &troupe_backend_v1::synchronize);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) op();
  b.call("synchronize", &troupe_backend_v1::synchronize);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// Prints one op's line (achieved rate, and its share of the device's peak) and keeps it
// for the JSON line.
struct reporter {
  const troupe_device_info& info;
  nlohmann::ordered_json& out;

  void operator()(const std::string& op, double ms, double flops, double bytes) {
    nlohmann::ordered_json j;
    j["op"] = op;
    j["ms"] = ms;
    char achieved[32], share[32] = "-";
    if (flops > 0) {
      const double tflops = flops / (ms * 1e-3) / 1e12;
      j["tflops"] = tflops;
      std::snprintf(achieved, sizeof achieved, "%.2f TFLOP/s", tflops);
      if (info.peak_fp32_tflops > 0) std::snprintf(share, sizeof share, "%.0f%%", 100 * tflops / info.peak_fp32_tflops);
    } else {
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      j["gbs"] = gbs;
      std::snprintf(achieved, sizeof achieved, "%.1f GB/s", gbs);
      if (info.peak_bandwidth_gbs > 0) std::snprintf(share, sizeof share, "%.0f%%", 100 * gbs / info.peak_bandwidth_gbs);
    }
    std::printf("  %-34s %10.3f %12s %10s\n", op.c_str(), ms, achieved, share);
    out["ops"].push_back(j);
  }
};

// The products: a square gemm and the CNN's second convolution, forward and backward.
void time_products(const backend_context& b, int reps, bool gpu, reporter& report) {
  {  // gemm, square
    const std::int64_t n = gpu ? 4096 : 1024;
    buffer a(b, n * n * 4, 1), bb(b, n * n * 4, 2), c(b, n * n * 4, 3);
    const double ms = time_ms(b, reps, [&] {
      b.call("gemm", &troupe_backend_v1::gemm, 0, 1, n, n, n, 1.f, a.f(), n, bb.f(), n, 0.f, c.f(), n);
    });
    report("gemm " + std::to_string(n) + "^3 (A B^T)", ms, 2.0 * n * n * n, 0);
  }
  {  // the CNN's second convolution, batch 128 (forward, then both backward products)
    const troupe_conv_geom g{32, 14, 14, 64, 3, 3, 1, 1};
    const std::int64_t batch = gpu ? 128 : 32, out_n = batch * 64 * 14 * 14, in_n = batch * 32 * 14 * 14;
    buffer x(b, in_n * 4, 4), w(b, 64 * 32 * 9 * 4, 5), bias(b, 64 * 4, 6), y(b, out_n * 4, 7);
    buffer gx(b, in_n * 4, 8), gw(b, 64 * 32 * 9 * 4, 9), gb(b, 64 * 4, 10);
    const double flops = 2.0 * batch * 64 * 32 * 9 * 14 * 14;
    const std::string shape = "conv 32->64 3x3 14x14 b" + std::to_string(batch);
    report(shape + " fwd", time_ms(b, reps, [&] {
             b.call("conv2d_forward", &troupe_backend_v1::conv2d_forward, y.f(), x.f(), w.f(), bias.f(), batch, &g);
           }), flops, 0);
    report(shape + " bwd", time_ms(b, reps, [&] {
             b.call("conv2d_backward", &troupe_backend_v1::conv2d_backward, gx.f(), gw.f(), gb.f(), y.f(), x.f(), w.f(),
                    batch, &g);
           }), 2 * flops, 0);
  }
}

// The streaming ops: elementwise, the optimizers' steps and max pooling.
void time_streams(const backend_context& b, int reps, bool gpu, reporter& report) {
  const std::int64_t n = gpu ? (64 << 20) : (4 << 20);
  {
    buffer x(b, n * 4, 11), y(b, n * 4, 12);
    report("relu " + std::to_string(n >> 20) + "M", time_ms(b, reps, [&] {
             b.call("relu_forward", &troupe_backend_v1::relu_forward, y.f(), x.f(), n);
           }), 0, 8.0 * n);
    report("axpy " + std::to_string(n >> 20) + "M", time_ms(b, reps, [&] {
             b.call("axpy", &troupe_backend_v1::axpy, y.f(), 0.5f, x.f(), n);
           }), 0, 12.0 * n);
  }
  {
    buffer p(b, n * 4, 13), g(b, n * 4, 14), v(b, n * 4, 15), m(b, n * 4, 16);
    const troupe_sgd_args s{0.01f, 0.9f, 5e-4f, 1};
    report("sgd_step " + std::to_string(n >> 20) + "M", time_ms(b, reps, [&] {
             b.call("sgd_step", &troupe_backend_v1::sgd_step, p.f(), g.f(), v.f(), n, &s);
           }), 0, 20.0 * n);
    const troupe_adam_args a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 0.1f, 0.03f};
    report("adam_step " + std::to_string(n >> 20) + "M", time_ms(b, reps, [&] {
             b.call("adam_step", &troupe_backend_v1::adam_step, p.f(), g.f(), m.f(), v.f(), n, &a);
           }), 0, 28.0 * n);
  }
  {
    const troupe_pool_geom g{64, 14, 14, 2, 2};
    const std::int64_t batch = gpu ? 128 : 32, in_n = batch * 64 * 14 * 14, out_n = batch * 64 * 7 * 7;
    buffer x(b, in_n * 4, 17), y(b, out_n * 4, 18), arg(b, out_n * 4, 19);
    report("maxpool 2x2 64x14x14 b" + std::to_string(batch) + " fwd", time_ms(b, reps, [&] {
             b.call("maxpool2d_forward", &troupe_backend_v1::maxpool2d_forward, y.f(), arg.i(), x.f(), batch, &g);
           }), 0, 4.0 * in_n + 8.0 * out_n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_text = "cuda";
  int reps = 20;
  bool tf32 = false;
  CLI::App app{"Time each backend op on one device"};
  app.add_option("--device", device_text, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--reps", reps, "Timed calls per op")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_flag("--tf32", tf32, "Allow TF32 tensor-core math in gemm and convolutions");
  CLI11_PARSE(app, argc, argv);

  auto dev = parse_device(device_text);
  if (!dev) {
    std::cerr << "bench_ops: " << dev.error().message << "\n";
    return 2;
  }
  auto opened = backend_context::open(*dev);
  if (!opened) {
    std::cerr << "bench_ops: --device " << device_text << ": " << opened.error().message << "\n";
    return 3;
  }
  const backend_context& b = *opened;
  if (tf32) b.call("set_tf32", &troupe_backend_v1::set_tf32, 1);
  const troupe_device_info info = b.info();
  const bool gpu = dev->kind == device_kind::cuda;
  std::printf("%s: %s", to_string(*dev).c_str(), info.name);
  if (info.peak_fp32_tflops > 0)
    std::printf(" (peak %.1f FP32 TFLOP/s, %.0f GB/s)", info.peak_fp32_tflops, info.peak_bandwidth_gbs);
  std::printf("\n  %-34s %10s %12s %10s\n", "op", "ms/call", "achieved", "of peak");

  nlohmann::ordered_json out;
  out["device"] = to_string(*dev);
  out["name"] = info.name;
  out["peak_fp32_tflops"] = info.peak_fp32_tflops;
  out["peak_bandwidth_gbs"] = info.peak_bandwidth_gbs;
  out["tf32"] = tf32;
  out["ops"] = nlohmann::json::array();
  reporter report{info, out};
  time_products(b, reps, gpu, report);
  time_streams(b, reps, gpu, report);
  std::cout << out.dump() << std::endl;
  return 0;
}
