// tokenflow: the command-line interface. Exit codes: 0 success, 2 bad input (one line on stderr
// naming the file and key), 1 any other failure, 130 interrupted.
#include <csignal>
#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "tokenflow/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "tokenflow: transformers as flows of measures, Sinkhorn Transformers and optimal transport.\n"
      "Every command writes DIR/summary.json and .npy arrays; `tokenflow COMMAND --help` lists its keys."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  tokenflow::cli::add_simulate_command(app);
  tokenflow::cli::add_resume_command(app);
  tokenflow::cli::add_reproduce_command(app);
  tokenflow::cli::add_demo_command(app);
  tokenflow::cli::add_gaussian_command(app);
  tokenflow::cli::add_meanfield_command(app);
  tokenflow::cli::add_stability_command(app);
  tokenflow::cli::add_train_command(app);
  tokenflow::cli::add_couple_command(app);
  tokenflow::cli::add_embed_command(app);
  tokenflow::cli::add_ot_command(app);
  tokenflow::cli::add_wasserstein_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "tokenflow: " << e.what() << " (see tokenflow --help)\n";
    return 2;
  } catch (const tokenflow::InputError& e) {
    std::cerr << "tokenflow: " << e.what() << "\n";
    return 2;
  } catch (const tokenflow::Cancelled&) {
    std::cerr << "tokenflow: interrupted\n";
    return 130;
  } catch (const std::exception& e) {
    std::cerr << "tokenflow: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
