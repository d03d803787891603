// Picking actions out of what a core returned (a vector of std::variant actions): all of
// one kind, or the single one of a kind (a test failure when there are 0 or several).
#pragma once

#include <boost/test/unit_test.hpp>

#include <variant>
#include <vector>

namespace troupe::test {

template <class A, class List>
std::vector<A> all_of(const List& actions) {
  std::vector<A> out;
  for (const auto& a : actions)
    if (auto* x = std::get_if<A>(&a)) out.push_back(*x);
  return out;
}

template <class A, class List>
A only(const List& actions) {
  auto v = all_of<A>(actions);
  BOOST_REQUIRE_EQUAL(v.size(), 1u);
  return v.front();
}

}  // namespace troupe::test
