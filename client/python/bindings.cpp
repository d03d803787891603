// _troupe: the Python bindings of troupe::kv::kvstore. Arrays cross as buffers without a
// copy: push reads and pull writes the caller's memory, which must be C-contiguous
// float32 (and writable for pulls); anything else is refused with a message naming the
// key, the dtype and the shape. Every blocking call releases the GIL, and waits in
// slices so that Ctrl-C raises KeyboardInterrupt. kv::error becomes troupe.Error with
// its code in `.code`. The friendlier API (torch tensors, lists of values) is troupe/kv.py.
// plan_fusion is Note [Tensor fusion]'s grouping and cut_buckets Note [Gradient buckets]'
// cut, for troupe/torch.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>

#include "client/kvstore.hpp"
#include "core/gradient_buckets.hpp"
#include "core/tensor_fusion.hpp"

namespace py = pybind11;
using namespace troupe;

namespace troupe {
void bind_model_files(py::module_& m);  // model_bindings.cpp
}

namespace {

py::object error_type;  // troupe.Error, set at import

std::string shape_str(const std::vector<py::ssize_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string key_str(const kv::key& k) {
  if (auto* i = std::get_if<std::int64_t>(&k)) return std::to_string(*i);
  return "\"" + std::get<std::string>(k) + "\"";
}

// `who`: "key 3", "allreduce", ... as the message names what the array is for.
[[noreturn]] void refuse(const std::string& who, const std::string& what) {
  throw kv::error("bad_dtype", who + ": " + what);
}

// The buffer of `obj` as a float32 array, refusing what would need a copy.
kv::array as_array(const std::string& who, const py::buffer& obj, bool writable) {
  py::buffer_info info;
  try {
    info = obj.request(writable);
  } catch (const py::error_already_set&) {
    refuse(who, writable ? "the output is not a writable buffer (a read-only array?)" : "the value is not a buffer");
  }
  const std::string shape = shape_str(info.shape);
  if (info.format != py::format_descriptor<float>::format() || info.itemsize != 4)
    refuse(who, "dtype with format '" + info.format + "' and shape " + shape + "; Troupe takes float32");
  py::ssize_t expect = 4;
  for (int d = static_cast<int>(info.ndim) - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expect)
      refuse(who, "float32 array of shape " + shape + " is not C-contiguous; pass a contiguous copy");
    expect *= info.shape[d];
  }
  kv::array a;
  a.data = static_cast<float*>(info.ptr);
  a.shape.assign(info.shape.begin(), info.shape.end());
  return a;
}

kv::array as_array(const kv::key& k, const py::buffer& obj, bool writable) {
  return as_array("key " + key_str(k), obj, writable);
}

kv::kvstore::reduction reduction_of(const std::string& op) {
  if (op == "average" || op == "avg") return kv::kvstore::reduction::average;
  if (op == "sum") return kv::kvstore::reduction::sum;
  if (op == "max") return kv::kvstore::reduction::max;
  if (op == "min") return kv::kvstore::reduction::min;
  if (op == "product") return kv::kvstore::reduction::product;
  throw kv::error("bad_job", "allreduce op \"" + op + "\" is not average, sum, max, min or product");
}

template <class F>
auto unlocked(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// wait()/wait_all() in slices of 100 ms, checking for Ctrl-C between them; `last` runs
// when the time is up (it abandons what is in flight and raises timed_out).
void interruptible(const std::function<bool(std::chrono::milliseconds)>& step, std::chrono::milliseconds timeout,
                   const std::function<void()>& last) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (unlocked([&] { return step(std::chrono::milliseconds(100)); })) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  unlocked([&] { last(); return 0; });
}

// The store's calls on keys: init, push, pull, their waits, the optimizer and barriers.
void bind_key_calls(py::class_<kv::kvstore>& store) {
  store
      .def("init", [](kv::kvstore& s, const kv::key& k, const py::buffer& v) {
             kv::array a = as_array(k, v, false);
             unlocked([&] { s.init(k, a); return 0; });
           })
      .def("push", [](kv::kvstore& s, const std::vector<kv::key>& keys, const std::vector<py::buffer>& vals, int prio) {
             std::vector<kv::const_array> arrays;
             for (std::size_t i = 0; i < vals.size() && i < keys.size(); ++i) arrays.push_back(as_array(keys[i], vals[i], false));
             return unlocked([&] { return s.push(keys, arrays, prio); });
           })
      .def("pull", [](kv::kvstore& s, const std::vector<kv::key>& keys, const std::vector<py::buffer>& outs, int prio) {
             std::vector<kv::array> arrays;
             for (std::size_t i = 0; i < outs.size() && i < keys.size(); ++i) arrays.push_back(as_array(keys[i], outs[i], true));
             return unlocked([&] { return s.pull(keys, arrays, prio); });
           })
      .def("row_sparse_pull", [](kv::kvstore& s, const kv::key& k, const std::vector<std::int64_t>& rows,
                                 const py::buffer& out, int prio) {
             kv::array a = as_array(k, out, true);
             return unlocked([&] { return s.row_sparse_pull(k, rows, a, prio); });
           })
      .def("wait", [](kv::kvstore& s, kv::handle h, double timeout_s) {
             interruptible([&](auto d) { return s.wait_for(h, d); },
                           std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000)),
                           [&] { s.wait(h, std::chrono::milliseconds(0)); });
           })
      .def("wait_all", [](kv::kvstore& s, double timeout_s) {
             interruptible([&](auto d) { return s.wait_all_for(d); },
                           std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000)),
                           [&] { s.wait_all(std::chrono::milliseconds(0)); });
           })
      .def("set_optimizer", [](kv::kvstore& s, const std::string& kind, float lr, float momentum, bool nesterov,
                               float weight_decay, float beta1, float beta2, float eps, const std::string& schedule,
                               std::int64_t warmup, std::int64_t total, float final_fraction) {
             kv::optimizer_spec o{kind, lr, momentum, nesterov, weight_decay, beta1, beta2, eps, schedule, warmup, total,
                                  final_fraction};
             unlocked([&] { s.set_optimizer(o); return 0; });
           })
      .def("barrier", [](kv::kvstore& s) { unlocked([&] { s.barrier(); return 0; }); });
}

// The store's collectives: allreduce, broadcast and allgather.
void bind_collectives(py::class_<kv::kvstore>& store) {
  store
      .def("allreduce", [](kv::kvstore& s, const py::buffer& in, const py::buffer& out, const std::string& op,
                           const std::string& name) {
             const auto r = reduction_of(op);
             kv::array a = as_array(std::string("allreduce"), in, false), b = as_array(std::string("allreduce"), out, true);
             unlocked([&] { s.allreduce(a, b, r, name); return 0; });
           })
      .def("broadcast", [](kv::kvstore& s, const py::buffer& value, std::uint32_t root, const std::string& name) {
             kv::array a = as_array(std::string("broadcast"), value, true);
             unlocked([&] { s.broadcast(a, root, name); return 0; });
           })
      .def("allgather", [](kv::kvstore& s, const py::buffer& in, const std::string& name) {
             kv::array a = as_array(std::string("allgather"), in, false);
             auto g = unlocked([&] { return s.allgather(a, name); });
             py::array_t<float> out(std::vector<py::ssize_t>(g.shape.begin(), g.shape.end()));
             std::copy(g.data.begin(), g.data.end(), out.mutable_data());
             return py::make_tuple(out, g.ranks, g.rows);
           });
}

// What the store says of itself, and its end.
void bind_properties(py::class_<kv::kvstore>& store) {
  store
      .def_property_readonly("rank", &kv::kvstore::rank)
      .def_property_readonly("num_workers", &kv::kvstore::num_workers)
      .def_property_readonly("resumed_step", &kv::kvstore::resumed_step)
      .def_property_readonly("restored_step", &kv::kvstore::restored_step)
      .def_property_readonly("type", &kv::kvstore::type)
      .def_property_readonly("mode", &kv::kvstore::mode)
      .def("staleness", &kv::kvstore::staleness)
      .def("transfer_stats",
           [](const kv::kvstore& s) {
             const auto t = s.transfers();
             py::dict d;
             d["shared_memory_calls"] = t.shared_memory_calls;
             d["network_calls"] = t.network_calls;
             d["shared_memory_bytes"] = t.shared_memory_bytes;
             d["network_bytes"] = t.network_bytes;
             return d;
           })
      .def("close", [](kv::kvstore& s) { unlocked([&] { s.close(); return 0; }); });
}

}  // namespace

PYBIND11_MODULE(_troupe, m) {
  m.doc() = "Troupe's key-value store client (use troupe.kv)";
  error_type = py::reinterpret_borrow<py::object>(
      py::module_::import("troupe.errors").attr("Error"));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kv::error& e) {
      py::object err = error_type(e.code(), e.what());
      PyErr_SetObject(error_type.ptr(), err.ptr());
    }
  });

  py::class_<kv::kvstore> store(m, "Store");
  bind_key_calls(store);
  bind_collectives(store);
  bind_properties(store);

  m.def("open", [](const std::string& type, const std::string& mode, std::uint32_t servers, std::int32_t staleness,
                   std::int64_t bound, double timeout_s) {
    kv::options o;
    o.type = type, o.mode = mode, o.servers = servers, o.staleness = staleness, o.big_array_bound = bound;
    o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
    return unlocked([&] { return kv::kvstore::open(o); });
  });
  bind_model_files(m);
  m.def("plan_fusion", [](const std::vector<std::int64_t>& numels, std::int64_t threshold_bytes) {
    if (threshold_bytes < 0)
      throw kv::error("bad_job", "a fusion threshold of " + std::to_string(threshold_bytes) +
                                     " bytes; give 0 (no fusion) or more");
    py::list groups;
    for (const fusion_group& g : plan_fusion(numels, threshold_bytes)) groups.append(py::make_tuple(g.first, g.last));
    return groups;
  });
  m.def("cut_buckets", [](const std::vector<std::int64_t>& bytes, std::int64_t min_bytes) {
    py::list buckets;
    for (const bucket_cut& c : cut_buckets(bytes, min_bytes)) buckets.append(py::make_tuple(c.first, c.last));
    return buckets;
  });
  m.def("open_local_group", [](std::uint32_t workers, const std::string& mode, std::uint32_t servers,
                               std::int32_t staleness, std::int64_t bound, double timeout_s) {
    kv::options o;
    o.mode = mode, o.servers = servers, o.staleness = staleness, o.big_array_bound = bound;
    o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
    return kv::kvstore::open_local_group(o, workers);
  });
}
