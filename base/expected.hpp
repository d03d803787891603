// A value or a failure message, for fallible operations in tensor/ (which knows nothing
// of CAF; actors/ turns a failure into a caf::error). The message is meant for a human:
// it says what is wrong and what to do about it.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace troupe {

struct failure {
  std::string message;
};

template <class T>
class expected {
 public:
  expected(T value) : v_(std::move(value)) {}
  expected(failure f) : v_(std::move(f)) {}

  explicit operator bool() const { return v_.index() == 0; }
  bool has_value() const { return v_.index() == 0; }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const failure& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, failure> v_;
};

}  // namespace troupe
