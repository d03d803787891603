// Tests for tensor/backend.cpp: --device parsing, the module loader's error for each way
// loading can fail, and opening devices: the CPU always, CUDA with a reason when it cannot.
#define BOOST_TEST_MODULE backend
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tensor/backend.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

BOOST_AUTO_TEST_CASE(device_names_parse_and_print) {
  BOOST_TEST((*parse_device("cpu") == cpu_device));
  BOOST_TEST((*parse_device("cuda") == device{device_kind::cuda, 0}));
  BOOST_TEST((*parse_device("cuda:3") == device{device_kind::cuda, 3}));
  BOOST_TEST(to_string(*parse_device("cuda:3")) == "cuda:3");
  BOOST_TEST(to_string(cpu_device) == "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CPU", ""}) {
    auto d = parse_device(bad);
    BOOST_REQUIRE(!d);
    BOOST_TEST(contains(d.error().message, "use cpu, cuda or cuda:N"), bad);
  }
}

BOOST_AUTO_TEST_CASE(the_module_path_follows_the_environment) {
  ::setenv("TROUPE_CUDA_MODULE", "/opt/x/libtroupe_cuda.so", 1);
  BOOST_TEST(cuda_module_path() == "/opt/x/libtroupe_cuda.so");
  ::unsetenv("TROUPE_CUDA_MODULE");
  BOOST_TEST(contains(cuda_module_path(), "/lib/libtroupe_cuda.so"));
}

BOOST_AUTO_TEST_CASE(each_way_a_module_can_fail_to_load_is_named) {
  auto missing = load_backend_module("/nonexistent/libtroupe_cuda.so");
  BOOST_REQUIRE(!missing);
  BOOST_TEST(contains(missing.error().message, "this build has no CUDA backend"));
  BOOST_TEST(contains(missing.error().message, "--device cpu"));

  const test::temp_dir dir("backend");
  const auto garbage = dir.file("not-a-library.so");
  std::ofstream(garbage) << "not an ELF file";
  auto unloadable = load_backend_module(garbage);
  BOOST_REQUIRE(!unloadable);
  BOOST_TEST(contains(unloadable.error().message, "could not load the CUDA backend"));

  // A real shared library that is not a Troupe module.
  const char* libz = "/lib/x86_64-linux-gnu/libz.so.1";
  if (std::filesystem::exists(libz)) {
    auto foreign = load_backend_module(libz);
    BOOST_REQUIRE(!foreign);
    BOOST_TEST(contains(foreign.error().message, "does not export troupe_backend_entry"));
  }
}

BOOST_AUTO_TEST_CASE(the_cpu_backend_always_opens) {
  auto b = backend_context::open(cpu_device);
  BOOST_REQUIRE(b.has_value());
  BOOST_TEST(b->name() == "cpu");
  BOOST_TEST(b->info().device_count == 1);
  float x[3] = {1, -2, 3};
  b->call("scale", &troupe_backend_v1::scale, x, 2.f, std::int64_t{3});
  BOOST_TEST(x[1] == -4.f);
  // A failing call (here a kernel larger than the image) becomes a backend_error that
  // carries the backend's own message.
  const troupe_conv_geom bad{1, 2, 2, 1, 5, 5, 1, 0};
  float in[4] = {}, w[25] = {}, out[4] = {};
  try {
    b->call("conv2d_forward", &troupe_backend_v1::conv2d_forward, out, in, w, nullptr, std::int64_t{1}, &bad);
    BOOST_ERROR("an invalid convolution was accepted");
  } catch (const backend_error& e) {
    BOOST_TEST(contains(e.what(), "cpu: conv2d_forward failed: "));
    BOOST_TEST(contains(e.what(), "geometry"));
  }
}

// Without a GPU (this build machine), opening CUDA fails and says why; with one, it opens.
BOOST_AUTO_TEST_CASE(cuda_opens_or_says_why_not) {
  auto b = backend_context::open({device_kind::cuda, 0});
  if (b) {
    BOOST_TEST(b->name() == "cuda");
    BOOST_TEST(b->info().device_count >= 1);
    auto beyond = backend_context::open({device_kind::cuda, b->info().device_count});
    BOOST_REQUIRE(!beyond);
    BOOST_TEST(contains(beyond.error().message, "was asked for, but this machine has"));
    return;
  }
  const std::string& why = b.error().message;
  BOOST_TEST_MESSAGE("cuda: " << why);
  BOOST_TEST(contains(why, "--device cpu"));
  const bool module_missing = contains(why, "this build has no CUDA backend");
  const bool no_driver = contains(why, "driver");
  const bool no_device = contains(why, "no CUDA device");
  BOOST_TEST((module_missing || no_driver || no_device), "the reason names no known cause: " << why);
}
