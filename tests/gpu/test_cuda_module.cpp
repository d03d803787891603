// Tests for the built CUDA module (gpu/, libtroupe_cuda.so) that need no GPU: it exports
// the backend entry point and nothing else, links cuBLAS, cuDNN, NCCL and the CUDA
// runtime, fills in every entry of the table, explains a missing driver or device, and a
// process that has loaded it still serves Prometheus metrics (linked cuBLAS would stop
// the exposer: Note [Why the CUDA backend is a module] in tensor/backend.cpp). Skipped
// where the module was not built (no CUDA toolkit).
#define BOOST_TEST_MODULE cuda_module
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "monitoring/metrics.hpp"
#include "tensor/backend.hpp"
#include "tests/support/http.hpp"

#ifndef TROUPE_CUDA_MODULE_FILE
#define TROUPE_CUDA_MODULE_FILE ""
#endif

using namespace troupe;
namespace utf = boost::unit_test;

namespace {

const std::string module_file = TROUPE_CUDA_MODULE_FILE;

boost::test_tools::assertion_result module_built(utf::test_unit_id) {
  boost::test_tools::assertion_result r(!module_file.empty());
  r.message() << "the CUDA module was not built (no CUDA toolkit at configure time)";
  return r;
}

std::string run(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  BOOST_REQUIRE(p);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p.get())) out.append(buf, n);
  return out;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(exports_only_the_entry_point_and_links_the_cuda_libraries, *utf::precondition(module_built)) {
  const std::string needed = run("readelf -d '" + module_file + "'");
  for (const char* lib : {"libcudart.so", "libcublas.so", "libcudnn.so", "libnccl.so"})
    BOOST_TEST(contains(needed, std::string("[") + lib), module_file << " does not link " << lib);
  const std::string symbols = run("nm -D --defined-only '" + module_file + "' | awk '$2 == \"T\" {print $3}'");
  BOOST_TEST(symbols == "troupe_backend_entry\n", "exported functions: " << symbols);
}

BOOST_AUTO_TEST_CASE(the_table_is_complete, *utf::precondition(module_built)) {
  auto t = load_backend_module(module_file);
  BOOST_REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.error().message));
  const troupe_backend_v1& b = **t;
  BOOST_TEST(b.abi_version == TROUPE_BACKEND_ABI_VERSION);
  BOOST_TEST(std::string(b.name) == "cuda");
  // Every entry: a missing one would be a null call on a GPU machine.
  const void* entries[] = {
      reinterpret_cast<const void*>(b.open), reinterpret_cast<const void*>(b.close),
      reinterpret_cast<const void*>(b.last_error), reinterpret_cast<const void*>(b.device_count),
      reinterpret_cast<const void*>(b.device_info), reinterpret_cast<const void*>(b.set_tf32),
      reinterpret_cast<const void*>(b.alloc), reinterpret_cast<const void*>(b.release),
      reinterpret_cast<const void*>(b.memory_stats), reinterpret_cast<const void*>(b.upload),
      reinterpret_cast<const void*>(b.download), reinterpret_cast<const void*>(b.fill_zero),
      reinterpret_cast<const void*>(b.synchronize), reinterpret_cast<const void*>(b.gemm),
      reinterpret_cast<const void*>(b.bias_add), reinterpret_cast<const void*>(b.channel_bias_add),
      reinterpret_cast<const void*>(b.bias_grad), reinterpret_cast<const void*>(b.relu_forward),
      reinterpret_cast<const void*>(b.relu_backward), reinterpret_cast<const void*>(b.axpy),
      reinterpret_cast<const void*>(b.scale), reinterpret_cast<const void*>(b.conv2d_forward),
      reinterpret_cast<const void*>(b.conv2d_backward), reinterpret_cast<const void*>(b.maxpool2d_forward),
      reinterpret_cast<const void*>(b.maxpool2d_backward), reinterpret_cast<const void*>(b.softmax_xent_forward),
      reinterpret_cast<const void*>(b.softmax_xent_backward), reinterpret_cast<const void*>(b.count_correct),
      reinterpret_cast<const void*>(b.all_finite), reinterpret_cast<const void*>(b.sgd_step),
      reinterpret_cast<const void*>(b.adam_step), reinterpret_cast<const void*>(b.collective_id),
      reinterpret_cast<const void*>(b.collective_open), reinterpret_cast<const void*>(b.collective_close),
      reinterpret_cast<const void*>(b.all_reduce_sum), reinterpret_cast<const void*>(b.copy),
      reinterpret_cast<const void*>(b.gelu_forward), reinterpret_cast<const void*>(b.gelu_backward),
      reinterpret_cast<const void*>(b.layer_norm_forward), reinterpret_cast<const void*>(b.layer_norm_backward)};
  int missing = 0;
  for (const void* e : entries) missing += e == nullptr;
  BOOST_TEST(missing == 0);
}

// Here there is no driver: the module must say so, not crash. On a GPU machine it counts.
BOOST_AUTO_TEST_CASE(device_count_works_or_names_the_missing_piece, *utf::precondition(module_built)) {
  auto t = load_backend_module(module_file);
  BOOST_REQUIRE(t.has_value());
  int count = -1;
  if ((*t)->device_count(&count) == 0) {
    BOOST_TEST(count >= 1);
    return;
  }
  const std::string why = (*t)->last_error();
  BOOST_TEST_MESSAGE("device_count: " << why);
  BOOST_TEST((contains(why, "driver") || contains(why, "no CUDA device")), why);
  // Without a driver the NCCL id cannot be made either, and that too is an error, not a crash.
  unsigned char id[128];
  std::size_t size = 0;
  if ((*t)->collective_id(id, sizeof id, &size) != 0) BOOST_TEST(!std::string((*t)->last_error()).empty());
}

BOOST_AUTO_TEST_CASE(the_exposer_serves_with_the_module_loaded, *utf::precondition(module_built)) {
  auto t = load_backend_module(module_file);
  BOOST_REQUIRE(t.has_value());
  int count = 0;
  (void)(*t)->device_count(&count);  // initialises the CUDA runtime, as --device cuda would
  monitoring::registry r("job-cuda");
  r.worker(0).samples->Increment(3);
  auto port = r.serve("127.0.0.1", 0);
  BOOST_REQUIRE_MESSAGE(port.has_value(), (port ? "" : port.error().message));
  auto body = troupe::test::http_get(*port, "/metrics");
  BOOST_REQUIRE(body.has_value());
  BOOST_TEST(contains(*body, "troupe_samples_total{troupe_job=\"job-cuda\",rank=\"0\",role=\"worker\"} 3"));
}
