// Tests for tensor/tensor.cpp: alignment, zero fill, deep copy, moves, views, and what
// a tensor without memory holds.
#define BOOST_TEST_MODULE tensor
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstdlib>

#include "tensor/tensor.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(allocation_is_aligned_and_zeroed) {
  for (std::int64_t n : {1, 3, 17, 1000}) {
    tensor t({n});
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(t.bytes()) % tensor_alignment == 0);
    for (std::int64_t i = 0; i < n; ++i) BOOST_TEST(t.data<float>()[i] == 0.f);
  }
  tensor i({4}, dtype::i32);
  BOOST_TEST(i.nbytes() == 16u);
  tensor u({4}, dtype::u8);
  BOOST_TEST(u.nbytes() == 4u);
}

BOOST_AUTO_TEST_CASE(copy_is_deep_and_move_transfers) {
  tensor a({2, 2});
  a.data<float>()[3] = 7.f;
  tensor b = a;
  BOOST_TEST(b.data<float>()[3] == 7.f);
  b.data<float>()[3] = 1.f;
  BOOST_TEST(a.data<float>()[3] == 7.f);
  const std::byte* p = a.bytes();
  tensor c = std::move(a);
  BOOST_TEST(c.bytes() == p);
  BOOST_TEST(a.empty());
}

BOOST_AUTO_TEST_CASE(a_tensor_or_view_without_memory_holds_no_elements) {
  // A default tensor has a scalar's shape, so numel() says 1; a size check on a received
  // tensor that compared numel() would pass a tensor sent without its one value.
  const tensor none;
  BOOST_TEST(none.empty());
  BOOST_TEST(none.numel() == 1);
  BOOST_TEST(held_numel(none) == 0);
  BOOST_TEST(held_numel(none.view()) == 0);
  BOOST_TEST(held_numel(const_tensor_view()) == 0);
  tensor moved({3, 2});
  const tensor taker = std::move(moved);
  BOOST_TEST(held_numel(moved) == 0);  // its shape still says (3, 2)
  BOOST_TEST(held_numel(taker) == 6);
  // With memory, the shape counts: a scalar holds one element, a zero extent none.
  const tensor scalar{shape{}};
  BOOST_TEST(held_numel(scalar) == 1);
  BOOST_TEST(held_numel(scalar.view()) == 1);
  const tensor zero({0, 5});
  BOOST_TEST(!zero.empty());
  BOOST_TEST(held_numel(zero) == 0);
  // A tensor without memory is not a scalar: copying it into one is refused, not a read
  // through a null pointer; copying no elements needs no memory.
  tensor one{shape{}};
  BOOST_CHECK_THROW(copy(one.view(), none.view()), contract_error);
  tensor nothing;
  BOOST_CHECK_THROW(copy(nothing.view(), none.view()), contract_error);
  tensor zero_dst({0});
  BOOST_CHECK_NO_THROW(copy(zero_dst.view(), tensor({0}).view()));
}

BOOST_AUTO_TEST_CASE(dtype_is_checked_on_access) {
  tensor t({3}, dtype::i32);
  BOOST_CHECK_THROW(t.data<float>(), contract_error);
  BOOST_CHECK_NO_THROW(t.data<std::int32_t>());
}

BOOST_AUTO_TEST_CASE(views_slice_reshape_flat) {
  tensor t({4, 3});
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  tensor_view rows = t.view().slice(1, 3);
  BOOST_TEST(rows.sizes() == (shape{2, 3}));
  BOOST_TEST(rows.data<float>()[0] == 3.f);
  BOOST_TEST(rows.is_contiguous());
  const_tensor_view flat = rows.reshape({6});
  BOOST_TEST(flat.data<float>()[5] == 8.f);
  BOOST_TEST(t.view().flat(10, 2).data<float>()[1] == 11.f);
  BOOST_CHECK_THROW(t.view().slice(2, 5), contract_error);
  BOOST_CHECK_THROW(t.view().reshape({5}), contract_error);
  BOOST_CHECK_THROW(t.view().flat(10, 3), contract_error);
}

BOOST_AUTO_TEST_CASE(copy_function_and_reshape) {
  tensor a({2, 3}), b({6});
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = static_cast<float>(i + 1);
  copy(b, a);
  BOOST_TEST(b.data<float>()[5] == 6.f);
  a.reshape({3, 2});
  BOOST_TEST(a.sizes() == (shape{3, 2}));
  BOOST_CHECK_THROW(a.reshape({7}), contract_error);
  a.fill_zero();
  BOOST_TEST(a.data<float>()[0] == 0.f);
}

BOOST_AUTO_TEST_CASE(adopt_uses_the_given_deleter) {
  static int freed = 0;
  auto* mem = static_cast<std::byte*>(std::malloc(16));  // stands in for a device allocator
  {
    tensor t = tensor::adopt(mem, [](std::byte* p) { std::free(p); ++freed; }, {4}, dtype::f32,
                             device{device_kind::cuda, 1});
    BOOST_TEST((t.where().kind == device_kind::cuda));
    BOOST_CHECK_THROW(tensor copy_of_device = t, contract_error);
  }
  BOOST_TEST(freed == 1);
}
