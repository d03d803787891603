// enum_names: an enum's names written once, as a table, from which both its name and its
// parse come, so a flag's choices and the names printed for them cannot drift apart.
//
//   constexpr std::array<enum_name<sync_mode>, 2> modes{{{sync_mode::sync, "sync"}, {sync_mode::async, "async"}}};
//   std::string_view name_of(sync_mode m) { return name_in(modes, m); }
//   expected<sync_mode> parse_sync_mode(std::string_view s) { return parse_in(modes, s, "mode"); }
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "base/expected.hpp"

namespace troupe {

template <class E>
struct enum_name {
  E value;
  std::string_view name;
};

// The table's name for `value`; "?" for a value the table does not list.
template <class E, std::size_t N>
constexpr std::string_view name_in(const std::array<enum_name<E>, N>& table, E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return "?";
}

// "a, b or c": the table's names, for a message that lists the choices.
template <class E, std::size_t N>
std::string names_in(const std::array<enum_name<E>, N>& table) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

// The table's value named `name`; else a failure that says so and lists the choices:
// "unknown WHAT 'NAME'; use A, B or C".
template <class E, std::size_t N>
expected<E> parse_in(const std::array<enum_name<E>, N>& table, std::string_view name, std::string_view what) {
  for (const auto& e : table)
    if (e.name == name) return e.value;
  return failure{"unknown " + std::string(what) + " '" + std::string(name) + "'; use " + names_in(table)};
}

}  // namespace troupe
