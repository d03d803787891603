// _troupe's model files: load_model_file reads a file that --save-model wrote (Note [Model
// files] in train/model_file.hpp) with every check of the C++ reader, and hands Python
// the spec, the input shape, the class count, the blocks, what made it (JSON) and the
// parameters as a float32 NumPy array. A file that fails a check raises troupe.Error
// ("malformed") naming the file and the fault. troupe/models.py is the Python face.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "client/kvstore.hpp"
#include "train/model_file.hpp"

namespace py = pybind11;

namespace troupe {

void bind_model_files(py::module_& m) {
  m.def("load_model_file", [](const std::string& path) {
    expected<saved_model> saved = [&] {
      py::gil_scoped_release release;
      return load_model(path);
    }();
    if (!saved) throw kv::error("malformed", saved.error().message);
    py::dict out;
    out["model"] = saved->spec;
    out["input_shape"] = std::vector<std::int64_t>(saved->input.dims().begin(), saved->input.dims().end());
    out["classes"] = saved->classes;
    out["source"] = saved->source.dump();
    py::list blocks;
    for (const auto& b : saved->net->blocks())
      blocks.append(py::make_tuple(b.name, std::vector<std::int64_t>(b.shape.dims().begin(), b.shape.dims().end()),
                                   b.offset));
    out["blocks"] = blocks;
    py::array_t<float> params(saved->params.numel());
    std::memcpy(params.mutable_data(), saved->params.bytes(), saved->params.nbytes());
    out["params"] = params;
    return out;
  });
}

}  // namespace troupe
