// Tests for train/model_spec.cpp: the short names, mlp widths, layer lists (inline and
// from a file) with canonical names, and clear errors naming the layer or line.
#define BOOST_TEST_MODULE model_spec
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "train/model_spec.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(short_names_expand) {
  auto mlp = parse_model_spec("mlp");
  BOOST_REQUIRE(mlp.has_value());
  BOOST_TEST(mlp->name == "mlp:784-256-128-10");
  BOOST_TEST(*mlp->input_features == 784);
  // flatten, fc, relu, fc, relu, fc
  BOOST_TEST(mlp->layers.size() == 6u);
  auto cnn = parse_model_spec("cnn");
  BOOST_REQUIRE(cnn.has_value());
  BOOST_TEST(cnn->name == "cnn:fashion");
  BOOST_TEST(cnn->layers.size() == 10u);
  BOOST_TEST(parse_model_spec("cnn:fashion")->name == "cnn:fashion");
}

BOOST_AUTO_TEST_CASE(custom_mlp_widths) {
  auto m = parse_model_spec("mlp:784-10");
  BOOST_REQUIRE(m.has_value());
  BOOST_TEST(m->layers.size() == 2u);
  BOOST_TEST(m->layers[1].size == 10);
  BOOST_TEST(parse_model_spec("mlp:20-30-40-10")->name == "mlp:20-30-40-10");
}

BOOST_AUTO_TEST_CASE(errors_name_the_problem_and_the_choices) {
  for (const char* bad : {"vgg", "mlp:", "mlp:784", "mlp:784--10", "mlp:784-0-10", "mlp:784-x-10", "mlp:784-10-",
                          "cnn:big", ""}) {
    auto m = parse_model_spec(bad);
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!m.has_value());
      BOOST_TEST(m.error().message.find("mlp:IN-H1-...-OUT") != std::string::npos);
    }
  }
}

// Note [Layer lists]: any sequence of layers, every option written out in the name.
BOOST_AUTO_TEST_CASE(a_layer_list_names_every_option) {
  auto m = parse_model_spec("layers:conv2d 8 pad=1;relu; maxpool2d ;flatten;  linear 32 ; layernorm; gelu; linear 10;");
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  BOOST_TEST(m->name ==
             "layers:conv2d 8 k=3 stride=1 pad=1; relu; maxpool2d k=2 stride=2; flatten; linear 32; layernorm; gelu; "
             "linear 10");
  BOOST_REQUIRE(m->layers.size() == 8u);
  BOOST_TEST((m->layers[0].op == layer_op::conv2d && m->layers[0].size == 8 && m->layers[0].kernel == 3 &&
              m->layers[0].pad == 1));
  BOOST_TEST((m->layers[2].op == layer_op::maxpool2d && m->layers[2].stride == 2));
  BOOST_TEST((m->layers[5].op == layer_op::layer_norm));
  BOOST_TEST((m->layers[6].op == layer_op::gelu));
  BOOST_TEST(!m->input_features.has_value());
  // The canonical name parses to itself.
  BOOST_TEST(parse_model_spec(m->name)->name == m->name);
}

BOOST_AUTO_TEST_CASE(a_residual_block_lists_its_layers) {
  auto m = parse_model_spec("layers:flatten; linear 16; residual( layernorm,linear 8 , gelu, linear 16 ); linear 10");
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  BOOST_TEST(m->name == "layers:flatten; linear 16; residual(layernorm, linear 8, gelu, linear 16); linear 10");
  BOOST_REQUIRE(m->layers.size() == 4u);
  BOOST_TEST((m->layers[2].op == layer_op::residual));
  BOOST_REQUIRE(m->layers[2].inner.size() == 4u);
  BOOST_TEST((m->layers[2].inner[3].op == layer_op::linear && m->layers[2].inner[3].size == 16));
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"layers:residual(linear 8, residual(linear 8))", "cannot hold another"},
           {"layers:residual linear 8", "written residual(L1, L2, ...)"},
           {"layers:residual(linear 8, gelu 1)", "layer 0 ('residual(linear 8, gelu 1)'): its layer 1 ('gelu 1')"},
           {"layers:residual()", "its layer 0 (''): an empty layer"}}) {
    auto bad = parse_model_spec(text);
    BOOST_TEST_CONTEXT(text) {
      BOOST_REQUIRE(!bad.has_value());
      BOOST_TEST(bad.error().message.find(want) != std::string::npos, bad.error().message);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_bad_layer_is_named_by_its_place_and_text) {
  const std::pair<const char*, const char*> cases[] = {
      {"layers:flatten; linear x", "layer 1 ('linear x'): 'x' is not an output width"},
      {"layers:linear", "layer 0 ('linear'): linear needs an output width"},
      {"layers:conv2d 8 size=3", "conv2d takes no option 'size'"},
      {"layers:conv2d 8 k=0", "k and stride of at least 1"},
      {"layers:relu 3", "relu takes no arguments"},
      {"layers:flatten;; linear 10", "layer 1 (''): an empty layer"},
      {"layers:softmax", "unknown layer 'softmax'"},
      {"layers:maxpool2d k=x", "'k=x' needs a whole number"},
      {"file:net.txt", "a model file is read where the command line is parsed"},
  };
  for (const auto& [text, want] : cases) {
    auto m = parse_model_spec(text);
    BOOST_TEST_CONTEXT(text) {
      BOOST_REQUIRE(!m.has_value());
      BOOST_TEST(m.error().message.find(want) != std::string::npos, m.error().message);
      BOOST_TEST(m.error().message.find("layers:L1; L2; ...") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_model_file_becomes_its_layer_list_and_errors_name_the_line) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("troupe-model-spec-" + std::to_string(static_cast<long>(::getpid())));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string good = write("good.txt", "# a small MLP\nflatten\n\nlinear 64   # hidden\nlayernorm\ngelu\nlinear 10\n");
  auto text = model_spec_from_file(good);
  BOOST_REQUIRE_MESSAGE(text.has_value(), (text ? "" : text.error().message));
  BOOST_TEST(*text == "layers:flatten; linear 64; layernorm; gelu; linear 10");
  const std::string bad = write("bad.txt", "flatten\n# comment\nlinear 0\n");
  auto b = model_spec_from_file(bad);
  BOOST_REQUIRE(!b.has_value());
  BOOST_TEST(b.error().message.find("model file " + bad + ", line 3 ('linear 0')") != std::string::npos,
             b.error().message);
  auto semi = model_spec_from_file(write("semi.txt", "flatten; linear 10\n"));
  BOOST_REQUIRE(!semi.has_value());
  BOOST_TEST(semi.error().message.find("line 1: one layer a line") != std::string::npos, semi.error().message);
  auto empty = model_spec_from_file(write("empty.txt", "# nothing\n"));
  BOOST_REQUIRE(!empty.has_value());
  BOOST_TEST(empty.error().message.find("no layers") != std::string::npos, empty.error().message);
  auto missing = model_spec_from_file((dir / "absent.txt").string());
  BOOST_REQUIRE(!missing.has_value());
  BOOST_TEST(missing.error().message.find("cannot read the model file") != std::string::npos);
  std::filesystem::remove_all(dir);
}

// Note [The gpt model]: the transformer as a layer list, sizes by key, errors by key.
BOOST_AUTO_TEST_CASE(gpt_expands_to_its_blocks_and_names_its_sizes) {
  auto d = parse_model_spec("gpt");
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  BOOST_TEST(d->name == "gpt:layers=6,dim=384,heads=6");
  BOOST_TEST(d->layers.size() == 1u + 2 * 6 + 2);  // embedding, two blocks a layer, layernorm, logits
  auto g = parse_model_spec("gpt:heads=2,layers=1,dim=32");
  BOOST_REQUIRE(g.has_value());
  BOOST_TEST(g->name == "gpt:layers=1,dim=32,heads=2");
  BOOST_TEST((g->layers[0].op == layer_op::embedding && g->layers[0].size == 32));
  BOOST_TEST((g->layers[1].op == layer_op::residual && g->layers[1].inner[1].op == layer_op::attention));
  BOOST_TEST(g->layers[1].inner[1].size == 2);
  BOOST_TEST(g->layers[2].inner[1].size == 128);  // the feed-forward's 4C
  BOOST_TEST((g->layers.back().op == layer_op::linear && g->layers.back().size == 0));  // linear classes
  for (const char* bad : {"gpt:layers=0", "gpt:dim=30,heads=4", "gpt:width=3", "gpt:layers", "gpt:layers=x"}) {
    auto m = parse_model_spec(bad);
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!m.has_value());
      BOOST_TEST(m.error().message.find(std::string("invalid model '") + bad) != std::string::npos);
    }
  }
  BOOST_TEST(parse_model_spec("gpt:dim=30,heads=4").error().message.find("not a multiple of heads=4") !=
             std::string::npos);
}

// A dropout rate is a decimal strictly between 0 and 1, written back in its shortest form.
BOOST_AUTO_TEST_CASE(dropout_in_a_list_and_in_gpt) {
  auto m = parse_model_spec("layers:flatten; dropout 0.250; linear 10");
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  BOOST_TEST(m->name == "layers:flatten; dropout 0.25; linear 10");
  BOOST_TEST((m->layers[1].op == layer_op::dropout && m->layers[1].rate == 0.25f));
  auto bn = parse_model_spec("layers:conv2d 8 pad=1; batchnorm; relu; flatten; linear 10");
  BOOST_REQUIRE(bn.has_value());
  BOOST_TEST((bn->layers[1].op == layer_op::batch_norm));
  BOOST_TEST(!parse_model_spec("layers:batchnorm 3").has_value());
  BOOST_TEST(parse_model_spec(m->name)->name == m->name);
  for (const char* bad : {"layers:dropout", "layers:dropout 1", "layers:dropout 0", "layers:dropout x",
                          "layers:dropout 0.1 k=2", "layers:dropout -0.1"}) {
    auto e = parse_model_spec(bad);
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!e.has_value());
      BOOST_TEST(e.error().message.find("dropout") != std::string::npos);
    }
  }
  // gpt: after the embedding and at the end of each block's branch; 0 is none.
  auto g = parse_model_spec("gpt:layers=1,dim=32,heads=2,dropout=0.1");
  BOOST_REQUIRE_MESSAGE(g.has_value(), (g ? "" : g.error().message));
  BOOST_TEST(g->name == "gpt:layers=1,dim=32,heads=2,dropout=0.1");
  BOOST_REQUIRE(g->layers.size() == 6u);
  BOOST_TEST((g->layers[1].op == layer_op::dropout));
  BOOST_TEST((g->layers[2].inner.back().op == layer_op::dropout && g->layers[3].inner.back().op == layer_op::dropout));
  BOOST_TEST(parse_model_spec(g->name)->name == g->name);
  auto none = parse_model_spec("gpt:layers=1,dim=32,heads=2,dropout=0");
  BOOST_REQUIRE(none.has_value());
  BOOST_TEST(none->name == "gpt:layers=1,dim=32,heads=2");
  BOOST_TEST(none->layers.size() == 5u);
  for (const char* bad : {"gpt:dropout=1", "gpt:dropout=x", "gpt:dropout"}) {
    auto e = parse_model_spec(bad);
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!e.has_value());
      BOOST_TEST(e.error().message.find(std::string("invalid model '") + bad) != std::string::npos);
    }
  }
}

// Note [The resnet model]: two stages of a convolution and a basic block, by width.
BOOST_AUTO_TEST_CASE(resnet_expands_to_its_stages) {
  auto d = parse_model_spec("resnet");
  BOOST_REQUIRE_MESSAGE(d.has_value(), (d ? "" : d.error().message));
  BOOST_TEST(d->name == "resnet:width=32");
  BOOST_TEST(d->layers.size() == 2u * 6 + 2);
  BOOST_TEST((d->layers[3].op == layer_op::residual && d->layers[3].inner.size() == 5u));
  BOOST_TEST(d->layers[6].size == 64);
  auto n = parse_model_spec("resnet:width=8");
  BOOST_REQUIRE(n.has_value());
  BOOST_TEST(n->name == "resnet:width=8");
  BOOST_TEST(parse_model_spec(n->name)->name == n->name);
  for (const char* bad : {"resnet:width=0", "resnet:depth=3", "resnet:width=x", "resnet:"}) {
    auto e = parse_model_spec(bad);
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!e.has_value());
      BOOST_TEST(e.error().message.find("width=W") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(transformer_layers_in_a_list) {
  auto m = parse_model_spec("layers:embedding 16; attention 4; linear classes");
  BOOST_REQUIRE_MESSAGE(m.has_value(), (m ? "" : m.error().message));
  BOOST_TEST(m->name == "layers:embedding 16; attention 4; linear classes");
  auto no_width = parse_model_spec("layers:embedding; linear classes");
  BOOST_REQUIRE(!no_width.has_value());
  BOOST_TEST(no_width.error().message.find("embedding needs a width") != std::string::npos);
  auto bad_heads = parse_model_spec("layers:embedding 16; attention x");
  BOOST_REQUIRE(!bad_heads.has_value());
  BOOST_TEST(bad_heads.error().message.find("'x' is not a head count") != std::string::npos);
}
