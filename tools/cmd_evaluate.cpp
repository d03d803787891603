// evaluate: loads a model file, checks it fits the data, scores it on the test set (never
// augmented: --augment is refused), and prints one JSON line (a language model's with its
// bits per character and a sample).
#include "tools/cmd_evaluate.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "tools/text_report.hpp"
#include "train/evaluate.hpp"
#include "train/model_file.hpp"

namespace troupe::cli {

namespace {

struct evaluate_options {
  std::string model_file;
  data_options data;
};

int run_evaluate(const evaluate_options& o) {
  if (o.data.augment != "none") {
    print_error("--augment " + o.data.augment +
                ": evaluate scores the test set as it is; augmentation applies to training only, so drop --augment");
    return exit_usage;
  }
  auto saved = load_model(o.model_file);
  if (!saved) {
    print_error("--model-file: " + saved.error().message);
    return exit_failed;
  }
  auto data = load_data(o.data, 1);
  if (!data) {
    print_error(data.error().message);
    return exit_failed;
  }
  const dataset& test = data->test;
  if (test.sample_shape().str() != saved->input.str() || test.num_classes != saved->classes) {
    print_error("--model-file: " + o.model_file + " holds a model for inputs of shape " + saved->input.str() + " and " +
                std::to_string(saved->classes) + " classes; the test set (" + test.name + ") has " +
                test.sample_shape().str() + " and " + std::to_string(test.num_classes));
    return exit_failed;
  }
  const eval_result r = evaluate(*saved->net, saved->params, test, 1000, host_compute(), &data->train);
  std::cerr << "evaluate: model " << saved->spec << " from " << o.model_file << " on " << r.samples << " test samples ("
            << test.name << ")\n";
  nlohmann::ordered_json out;
  out["model"] = saved->spec;
  out["test_accuracy"] = round_to(r.accuracy, 4);
  out["test_loss"] = round_to(r.loss, 4);
  out["samples"] = r.samples;
  out["source"] = saved->source;
  if (!data->vocabulary.empty())
    add_text_output(out, "evaluate", r.loss, saved->params, {&*saved->net, &data->vocabulary, o.data.sample_chars, 1});
  std::cout << out.dump() << std::endl;
  return exit_ok;
}

}  // namespace

command add_evaluate(CLI::App& parent) {
  auto o = std::make_shared<evaluate_options>();
  CLI::App* app = parent.add_subcommand("evaluate", "Score a model file (from --save-model) on the test set");
  app->add_option("--model-file", o->model_file, "The model file to score (Troupe's format, from --save-model)")
      ->required();
  add_data_options(*app, o->data);
  return {app, [o] { return run_evaluate(*o); }};
}

}  // namespace troupe::cli
