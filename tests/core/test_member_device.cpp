// member_device: where a member computes, alone. On the host without a group there is no
// backend; a local group opens the CPU backend for its collectives, and a group of one
// forms from its own id and sums in place; --precision bf16 on a device is refused before
// anything opens; a device this machine lacks is refused with the backend's reason (with
// a GPU, the context opens and reports its device instead).
#define BOOST_TEST_MODULE member_device
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

#include "core/member_device.hpp"

using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(the_host_alone_opens_no_backend) {
  member_device d;
  BOOST_REQUIRE(!d.open(compute_options{}, 0, false, "worker 0"));
  BOOST_TEST(!d.exec().on_backend());
  BOOST_TEST(!d.off_host().has_value());
  BOOST_TEST(!d.in_group());
}

BOOST_AUTO_TEST_CASE(a_local_group_on_the_host_opens_the_cpu_backend_and_forms) {
  member_device d;
  compute_options c;
  c.products = precision::bf16;  // the host computes bf16 products
  BOOST_REQUIRE(!d.open(c, 1, true, "worker 1"));
  BOOST_TEST(d.exec().on_backend());
  BOOST_TEST(d.exec().host_memory());
  BOOST_TEST((d.exec().products() == precision::bf16));
  BOOST_TEST(!d.off_host().has_value());
  const auto id = d.new_group_id();
  BOOST_TEST(!id.empty());
  d.join_group(id, 1, 0, 5s);
  BOOST_REQUIRE(d.in_group());
  tensor t(shape{3});
  t.data<float>()[1] = 2.5f;
  d.group().all_reduce_sum({t.view()});
  BOOST_TEST(t.data<float>()[1] == 2.5f);
}

BOOST_AUTO_TEST_CASE(bf16_products_on_a_device_are_refused_before_it_opens) {
  member_device d;
  compute_options c;
  c.where = device{device_kind::cuda, 0};
  c.products = precision::bf16;
  auto f = d.open(c, 0, false, "worker 3");
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::bad_job));
  BOOST_TEST(f->detail.find("worker 3: --precision bf16 computes on the CPU only") == 0, f->detail);
  BOOST_TEST(f->detail.find("--tf32") != std::string::npos);
  BOOST_TEST(!d.off_host().has_value());
}

BOOST_AUTO_TEST_CASE(a_device_this_machine_lacks_is_refused_with_the_backends_reason) {
  compute_options c;
  c.where = device{device_kind::cuda, 0};
  const bool gpu = backend_context::open(c.where).has_value();
  member_device d;
  auto f = d.open(c, 0, false, "worker 4");
  if (gpu) {  // a machine with a GPU opens it
    BOOST_TEST(!f.has_value());
    BOOST_REQUIRE(d.off_host().has_value());
    BOOST_TEST((d.off_host()->kind == device_kind::cuda));
    return;
  }
  BOOST_REQUIRE(f.has_value());
  BOOST_TEST((f->code == errc::bad_job));
  BOOST_TEST(f->detail.find("worker 4: ") == 0, f->detail);
  BOOST_TEST(f->detail.size() > std::string("worker 4: ").size());
  BOOST_TEST(!d.off_host().has_value());
}
