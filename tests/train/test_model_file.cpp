// Tests for train/model_file.cpp (Note [Model files]): an MLP's and a CNN's parameters
// come back bit-exactly with their spec, input, classes and source, and a language
// model's with its vocabulary as its classes; a ".npz" name writes
// NumPy's archive, one array per block; a file whose model does not parse or build, whose
// parameters do not number what its model has, or whose blocks differ is refused by name;
// saving the wrong number of parameters is refused before anything is written.
#define BOOST_TEST_MODULE model_file
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <fstream>
#include <iterator>

#include "tensor/tensor_file.hpp"
#include "tests/support/models.hpp"
#include "tests/support/temp_dir.hpp"
#include "train/model_file.hpp"

using namespace troupe;

namespace {

tensor initialised(const model& m, std::uint64_t seed) {
  tensor p = tensor::uninitialized({m.num_params()});
  m.init_params(p, seed);
  return p;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(parameters_come_back_bit_exactly_with_what_made_them) {
  test::temp_dir dir("model-file");
  for (const std::string spec : {"mlp", "cnn"}) {
    const model m = test::build_model(spec);
    const tensor p = initialised(m, 3);
    const auto path = dir.path / (spec + ".troupe");
    BOOST_REQUIRE(!save_model(path, spec, m, p, {{"command", "test"}, {"epochs", 2}}));
    auto back = load_model(path);
    BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
    BOOST_TEST(back->spec == spec);
    BOOST_TEST(back->input.str() == shape({1, 28, 28}).str());
    BOOST_TEST(back->classes == 10);
    BOOST_TEST(back->source["epochs"].get<int>() == 2);
    BOOST_REQUIRE(back->params.numel() == p.numel());
    BOOST_TEST(std::memcmp(back->params.bytes(), p.bytes(), p.nbytes()) == 0);
  }
}

// A language model scores every position of its context: its classes are its vocabulary,
// and the file builds the same model again.
BOOST_AUTO_TEST_CASE(a_language_models_classes_are_its_vocabulary) {
  test::temp_dir dir("model-file");
  const std::string spec = "gpt:layers=1,dim=16,heads=2";
  auto m = model::build(*parse_model_spec(spec), shape({12}), 28);
  BOOST_REQUIRE(m.has_value());
  const tensor p = initialised(*m, 6);
  const auto path = dir.path / "lm.troupe";
  BOOST_REQUIRE(!save_model(path, spec, *m, p, {}));
  auto back = load_model(path);
  BOOST_REQUIRE_MESSAGE(back.has_value(), (back ? "" : back.error().message));
  BOOST_TEST(back->classes == 28);
  BOOST_TEST(back->input.str() == shape({12}).str());
  BOOST_TEST(back->net->num_params() == m->num_params());
  BOOST_TEST(std::memcmp(back->params.bytes(), p.bytes(), p.nbytes()) == 0);
}

BOOST_AUTO_TEST_CASE(a_npz_name_writes_one_array_per_block) {
  test::temp_dir dir("model-file");
  const model m = test::build_model("mlp");
  const tensor p = initialised(m, 4);
  const auto path = dir.path / "weights.npz";
  BOOST_REQUIRE(!save_model(path, "mlp", m, p, {}));
  std::ifstream in(path, std::ios::binary);
  const std::string b{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  BOOST_TEST(b.compare(0, 2, "PK") == 0);
  for (const auto& block : m.blocks()) BOOST_TEST(has(b, block.name + ".npy"), block.name);
  BOOST_TEST(!load_model(path).has_value());  // not Troupe's format: --init-from takes that one
}

BOOST_AUTO_TEST_CASE(a_file_that_does_not_match_its_model_is_refused_by_name) {
  test::temp_dir dir("model-file");
  const model m = test::build_model("mlp");
  const tensor p = initialised(m, 5);
  const auto path = dir.path / "bad.troupe";
  const nlohmann::json good = {{"model", "mlp"}, {"input_shape", {1, 28, 28}}, {"classes", 10}};
  auto refused = [&](nlohmann::json meta, const_tensor_view params, const std::string& said) {
    BOOST_REQUIRE(!write_tensor_file(path, "troupe-model", meta, {{"params", params}}));
    auto r = load_model(path);
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(has(r.error().message, said), r.error().message);
    BOOST_TEST(has(r.error().message, path.string()), r.error().message);
  };
  auto meta = good;
  meta["model"] = "no-such-model";
  refused(meta, p.view(), "its model 'no-such-model'");
  refused(good, p.view().flat(0, 10), "holds 10 parameters where model 'mlp' has");
  meta = good;
  meta["blocks"] = nlohmann::json::array({{{"name", "x"}, {"shape", {1}}, {"offset", 0}}});
  refused(meta, p.view(), "blocks are not those");
  meta = good;
  meta.erase("classes");
  refused(meta, p.view(), "lacks the model, the input shape or the class count");
  meta = good;
  meta["input_shape"] = {1, -28};
  refused(meta, p.view(), "input shape is not a shape");
  const auto why = save_model(dir.path / "short.troupe", "mlp", m, p.view().flat(0, 3), {});
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(has(*why, "3 parameters for a model of"), *why);
  BOOST_TEST(!std::filesystem::exists(dir.path / "short.troupe"));
}
