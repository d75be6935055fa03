// The config keys of every command (tokenflow/command_keys.hpp).
#include "tokenflow/command_keys.hpp"

#include "tokenflow/error.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/train_config.hpp"

namespace tokenflow {

namespace {
std::vector<KeySpec> joined(const std::vector<KeySpec>& a, const std::vector<KeySpec>& b) {
  std::vector<KeySpec> keys = a;
  keys.insert(keys.end(), b.begin(), b.end());
  return keys;
}
}  // namespace

const std::vector<CommandKeys>& all_command_keys() {
  static const std::vector<CommandKeys> commands{
      {"simulate", "The particle flow (`tokenflow resume` continues a run from its checkpoint).", simulation_schema()},
      {"gaussian", "The keys of `tokenflow simulate` (one config serves both; `tokenflow gaussian --help` says how they are read; run.integrator defaults to dopri5 here), plus:",
       joined(with_study_defaults(simulation_schema(), gaussian_defaults()), gaussian_extra_schema())},
      {"meanfield", "The keys of `tokenflow simulate` (run.T defaults to 0.1 and run.dt to run.T here), plus:",
       joined(with_study_defaults(simulation_schema(), meanfield_defaults()), meanfield_extra_schema())},
      {"stability", "The keys of `tokenflow simulate` (init.n defaults to 512 here; rk4 or euler), plus:",
       joined(with_study_defaults(simulation_schema(), stability_defaults()), stability_extra_schema())},
      {"train", "The Sinkhorn Transformer: the coupling task, the model and the optimizer.", train_command_keys()}};
  return commands;
}

const CommandKeys& command_keys(const std::string& command) {
  std::vector<std::string> names;
  for (const CommandKeys& c : all_command_keys()) {
    if (c.command == command) return c;
    names.push_back(c.command);
  }
  const std::string near = nearest(command, names);
  throw InputError("", "command",
                   "no command '" + command + "' reads a config" + (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

std::string config_reference_markdown() {
  std::string out =
      "# Config keys\n\n"
      "Every key of every command that reads a TOML config (`--config FILE`, `--set key=value`), with its\n"
      "default, its range and its meaning. An unknown key, a value of the wrong type or out of its range\n"
      "is refused (exit 2) with one line naming the file and the key. Python's config dicts are read by\n"
      "the same readers (`tokenflow.config_keys(command)` lists these keys).\n\n"
      "This page is generated from the schemas in the source (`tokenflow config --markdown`, or\n"
      "`make config-docs`); the tests check that it is current.\n";
  for (const CommandKeys& c : all_command_keys()) {
    out += "\n## `tokenflow " + c.command + "`\n\n" + c.summary + "\n\n";
    // The studies list their own keys and those of simulate's whose default they change.
    std::vector<KeySpec> own = c.keys;
    if (c.command != "simulate" && c.command != "train") {
      const std::vector<KeySpec>& simulate = simulation_schema();
      own.clear();
      for (std::size_t k = 0; k < c.keys.size(); ++k)
        if (k >= simulate.size() || c.keys[k].default_text != simulate[k].default_text) own.push_back(c.keys[k]);
    }
    out += keys_markdown(own);
  }
  return out;
}

}  // namespace tokenflow
