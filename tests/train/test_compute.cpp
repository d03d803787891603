// Tests for tensor/compute.cpp: the host compute and a compute on the CPU backend agree op
// by op; tensors made through a backend come from its allocator and go back to it; and
// upload, download, copy and fill_zero move the bytes they should.
#define BOOST_TEST_MODULE compute
#include <boost/test/unit_test.hpp>

#include <cstring>

#include "tensor/compute.hpp"
#include "tests/support/numeric.hpp"
#include "train/layer.hpp"

using namespace troupe;
using troupe::test::random_tensor;

namespace {

bool same(const_tensor_view a, const_tensor_view b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.bytes(), b.bytes(), a.nbytes()) == 0;
}

backend_context open_cpu() {
  auto b = backend_context::open(cpu_device);
  BOOST_REQUIRE(b.has_value());
  return std::move(b).value();
}

}  // namespace

BOOST_AUTO_TEST_CASE(tensors_come_from_the_backend_and_the_copies_move_bytes) {
  backend_context b = open_cpu();
  const compute c(b, true);
  BOOST_TEST(c.on_backend());
  BOOST_TEST(!c.host_memory());
  BOOST_TEST(host_compute().host_memory());
  const auto before = b.memory().allocations;
  tensor src = random_tensor({3, 5}, 1);
  {
    tensor t = c.make({3, 5});
    BOOST_TEST(b.memory().allocations == before + 1);
    tensor zeros({3, 5}), back({3, 5}), other = c.make({3, 5});
    c.download(back, t);
    BOOST_TEST(same(back, zeros));  // made zero-filled
    c.upload(t, src);
    c.copy(other, t);
    c.download(back, other);
    BOOST_TEST(same(back, src));
    c.fill_zero(other);
    c.download(back, other);
    BOOST_TEST(same(back, zeros));
  }
  BOOST_CHECK_THROW(c.upload(c.make({2}), src), contract_error);  // sizes differ
}

BOOST_AUTO_TEST_CASE(each_op_through_the_cpu_backend_equals_the_host_op) {
  backend_context b = open_cpu();
  const compute dev(b);
  const compute& host = host_compute();
  for (const compute* c : {&host, &dev}) BOOST_TEST_CONTEXT(c->name()) {
      tensor a = random_tensor({4, 6}, 2), w = random_tensor({3, 6}, 3), bias = random_tensor({3}, 4);
      tensor y1({4, 3}), y2({4, 3});
      host.gemm(y1, a, transpose::no, w, transpose::yes);
      host.bias_add(y1, bias);
      c->gemm(y2, a, transpose::no, w, transpose::yes);
      c->bias_add(y2, bias);
      BOOST_TEST(same(y1, y2));
      tensor r1({4, 3}), r2({4, 3});
      host.relu_forward(r1, y1);
      c->relu_forward(r2, y2);
      BOOST_TEST(same(r1, r2));
      tensor labels({4}, dtype::i32), p1({4, 3}), p2({4, 3});
      for (int i = 0; i < 4; ++i) labels.data<std::int32_t>()[i] = i % 3;
      BOOST_TEST(host.softmax_xent_forward(p1, y1, labels) == c->softmax_xent_forward(p2, y2, labels));
      BOOST_TEST(host.count_correct(y1, labels) == c->count_correct(y2, labels));
      tensor gb1({3}), gb2({3});
      host.bias_grad_accumulate(gb1, y1);
      c->bias_grad_accumulate(gb2, y2);
      BOOST_TEST(same(gb1, gb2));
    }
}

// bf16 products run on the host: a compute with host memory takes them (through the CPU
// backend too, bypassing its fp32 table), and a staged one, standing in for a device,
// refuses them.
BOOST_AUTO_TEST_CASE(bf16_products_need_host_memory) {
  backend_context b = open_cpu();
  compute staged(b, true), direct(b), host;
  BOOST_CHECK_THROW(staged.set_precision(precision::bf16), contract_error);
  BOOST_TEST((staged.products() == precision::fp32));
  staged.set_precision(precision::fp32);
  tensor a({1, 1}), w({1, 1});
  a.data<float>()[0] = 1.f + 1.f / 1024.f;  // rounds to 1 in bf16
  w.data<float>()[0] = 2.f;
  for (compute* c : {&direct, &host}) BOOST_TEST_CONTEXT(c->name()) {
      c->set_precision(precision::bf16);
      BOOST_TEST((c->products() == precision::bf16));
      tensor y = c->make({1, 1});
      c->gemm(y, a, transpose::no, w, transpose::yes);
      BOOST_TEST(y.data<float>()[0] == 2.f);
      c->set_precision(precision::fp32);
      c->gemm(y, a, transpose::no, w, transpose::yes);
      BOOST_TEST(y.data<float>()[0] == 2.f * a.data<float>()[0]);
    }
}
