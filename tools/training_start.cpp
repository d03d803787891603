// training_start: a training job's data, model and resume point from its flags.
#include "tools/training_start.hpp"

#include <iostream>

namespace troupe::cli {

std::variant<training_start, int> start_training_job(job_spec& job, const job_cli_options& o) {
  auto data = load_data(o.data, job.train.seed);
  if (!data) {
    print_error(data.error().message);
    return exit_failed;
  }
  auto shared = std::make_shared<const dataset_split>(std::move(*data));
  std::string cut_note;
  auto m = prepare_job(job, *shared, &cut_note);
  if (!m) {
    print_error(m.error().message);
    return exit_usage;
  }
  if (!cut_note.empty()) std::cerr << cut_note << std::endl;
  auto resume = resume_point_for(job, *m, o.resume);
  if (!resume) {
    print_error(resume.error().message);
    return exit_failed;
  }
  return training_start{std::move(shared), std::move(*m), std::move(*resume)};
}

}  // namespace troupe::cli
