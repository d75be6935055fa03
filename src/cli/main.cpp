// tokenflow: the command-line interface. Exit codes: 0 success, 2 bad input (one line on stderr
// naming the file and key), 1 any other failure (a failed write names the file and the cause),
// 130 interrupted by SIGINT, 143 by SIGTERM (src/cli/common.cpp handles both for every command).
// Under mpirun with several ranks (a build with MPI) simulate, train and resume run distributed
// (src/distributed/); only rank 0 prints and writes. A build without MPI started on several ranks
// stops with a message (exit code 2).
#include <malloc.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "../distributed/world/world.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/echo.hpp"
#include "result_line.hpp"
#include "tokenflow/config.hpp"
#include "tokenflow/error.hpp"

namespace {

// The commands that run on several MPI ranks; any other command would write its outputs once per
// rank.
bool runs_distributed(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    const std::string command = argv[i];
    return command == "simulate" || command == "train" || command == "resume";
  }
  return true;  // no command: CLI11's own message
}

// What decides the memory of the command that ran, for the "out of memory" line.
std::string memory_keys(int argc, char** argv) {
  std::string command;
  for (int i = 1; i < argc && command.empty(); ++i)
    if (argv[i][0] != '-') command = argv[i];
  if (command == "ot" || command == "wasserstein")
    return "the sizes n and m of --x and --y (or --cost-matrix): n m pairs; ot's --no-plan and --operator "
           "online keep memory O(n + m)";
  if (command == "train") return "model.width, model.layers, model.k, task.n and train.batch";
  if (command == "couple") return "the model (model.width, model.layers) and the sizes of --x and --y";
  if (command == "embed") return "the vectors file and the texts";
  if (command == "moments") return "the size n x d of --points";
  if (command == "gaussian") return "the dimension d of init.mean and init.cov, run.T / run.dt (frames)";
  if (command == "meanfield") return "meanfield.ns, init.d, attention.heads";
  return "init.n, init.d, attention.heads, run.save_every";
}

// tokenflow --version: the version and what this build was made with.
std::string version_text() {
  namespace dist = tokenflow::distributed;
  std::string simd =
#if defined(__AVX512F__)
      "AVX-512";
#elif defined(__AVX2__)
      "AVX2";
#else
      "baseline SIMD";
#endif
  std::string text = std::string("tokenflow ") + TOKENFLOW_VERSION + " (" +
#if defined(__clang__)
                     "clang " + __clang_version__ +
#elif defined(__GNUC__)
                     "GCC " + __VERSION__ +
#endif
                     ", " + simd +
#if defined(_OPENMP)
                     ", OpenMP" +
#endif
                     (dist::built_with_mpi() ? ", MPI" : ", no MPI") + ")";
  return text;
}

// Done: one result line on stdout, read back from the summary the command committed (not with
// reproduce --list, which lists and writes nothing; demo and embed print their own line).
void print_result_lines(const CLI::App& app, std::filesystem::file_time_type started) {
  for (const CLI::App* command : app.get_subcommands()) {
    const CLI::Option* out = command->get_option_no_throw("--out");
    const CLI::Option* list = command->get_option_no_throw("--list");
    if (out != nullptr && out->count() > 0 && (list == nullptr || list->count() == 0) &&
        command->get_name() != "demo" && command->get_name() != "embed")
      tokenflow::cli::print_result_line(out->as<std::string>(), std::cout, started);
  }
}

// "tokenflow: unknown command 'simulat' (did you mean 'simulate'?); ..." when the first argument is
// a word that names no command, else "" (CLI11 would say only that a subcommand is required).
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands({})) {
    if (command->get_name() == word) return "";
    names.push_back(command->get_name());
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  const std::string guess = tokenflow::nearest(word, names);
  const std::string shown = word.size() <= 80 ? word : word.substr(0, 77) + "...";
  return "tokenflow: unknown command '" + shown + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)") +
         "; one of: " + list;
}

// "tokenflow ot: unknown flag '--reg' (did you mean '--epsilon'?); ..." for the first flag of the
// command line that its command does not have, else "". POT's names (reg, numItermax, stopThr) map
// to ours; other words get the nearest flag when one is close.
std::string unknown_flag(const CLI::App& app, int argc, char** argv) {
  if (argc < 3) return "";
  const CLI::App* command = nullptr;
  for (const CLI::App* c : app.get_subcommands({}))
    if (c->get_name() == argv[1]) command = c;
  if (command == nullptr) return "";
  std::vector<std::string> flags{"--help"};
  for (const CLI::Option* option : command->get_options())
    for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
  static const std::vector<std::pair<std::string, std::string>> pot_names{
      {"--reg", "--epsilon"}, {"--numItermax", "--max-iter"}, {"--stopThr", "--tol"}};
  for (int i = 2; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0 || word == "--") continue;
    word = word.substr(0, word.find('='));
    if (std::find(flags.begin(), flags.end(), word) != flags.end()) continue;
    std::string guess = tokenflow::nearest(word, flags);
    for (const auto& [theirs, ours] : pot_names)
      if (word == theirs && std::find(flags.begin(), flags.end(), ours) != flags.end()) guess = ours;
    const std::string shown = word.size() <= 80 ? word : word.substr(0, 77) + "...";
    return "tokenflow " + command->get_name() + ": unknown flag '" + shown + "'" +
           (guess.empty() ? "" : " (did you mean '" + guess + "'?)") + "; tokenflow " + command->get_name() +
           " --help lists its flags";
  }
  return "";
}

// Prints an error and ends this rank. With several ranks the failure may leave other ranks waiting
// in a collective, so it stops them all (MPI_Abort with the same exit code); each failing rank
// prints its line (rank 0 plainly, the others with their rank), so the message is not lost when
// the abort reaches rank 0 first.
int fail(const std::string& line, int code) {
  namespace dist = tokenflow::distributed;
  if (dist::world() == nullptr) {
    std::cerr << tokenflow::bounded_line(line) << "\n";
    return code;
  }
  if (dist::is_root())
    std::cerr << tokenflow::bounded_line(line) << std::endl;
  else
    std::cerr << "[rank " << dist::world()->rank() << "] " << tokenflow::bounded_line(line) << std::endl;
  dist::abort_world(code);
}

// The solvers allocate and free O(n) buffers on every iteration (a Sinkhorn soft-min through the
// grid: the scaled points, weights, row flags, about a dozen vectors of n doubles). glibc's default
// gives the freed top of the heap back to the system (trim threshold 128 KiB, adapted to at most
// 64 MiB) and the next call faults every page in again: at n = 10^5 that was 16 % of a `tokenflow
// ot` run's time, and with the kernel's zeroing, 40 % of its wall time. Blocks up to 32 MiB (the
// most mallopt takes) come from the heap, and up to 1 GiB freed at its top is kept for the next
// call; the peak memory is unchanged, it is only not returned until the process ends.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  namespace dist = tokenflow::distributed;
  const auto started = std::filesystem::file_time_type::clock::now();
  // Before any thread starts (OpenMP, MPI): the signal mask is inherited by every thread.
  tokenflow::cli::start_signal_watcher();
  if (dist::launcher_ranks() > 1) {
    if (!dist::built_with_mpi()) {
      if (dist::launcher_rank() == 0) std::cerr << "tokenflow: " << dist::no_mpi_message(dist::launcher_ranks()) << "\n";
      return 2;
    }
    if (!runs_distributed(argc, argv)) {
      if (dist::launcher_rank() == 0)
        std::cerr << "tokenflow: only simulate, train and resume run on several MPI ranks; run this command as one process\n";
      return 2;
    }
    dist::init_world(argc, argv);
  }
  CLI::App app{
      "tokenflow: transformers as flows of measures, Sinkhorn Transformers and optimal transport.\n"
      "Every command writes DIR/summary.json and .npy arrays; `tokenflow COMMAND --help` lists its keys."};
  app.footer(
      "Output folders: DIR/.tokenflow-outputs lists every file a run wrote in --out DIR (subfolders file by\n"
      "file, with sizes and hashes) and the command. A rerun replaces exactly those files; every other file under\n"
      "DIR stays. Refused before any work (exit 2): DIR holds another command's outputs, a listed file was\n"
      "changed since, the run would replace a file it reads, a name it writes is taken, or another tokenflow\n"
      "process is writing into DIR (an flock on DIR; the message names its pid). Outputs appear all at\n"
      "once, fsynced, or not at all (a failed write: exit 1, DIR unchanged). A run's bookkeeping lives in\n"
      "DIR/.staging-PID-TOKEN; no other file or folder is ever cleaned up, whatever its name.\n"
      "Exit codes: 0 done, 1 failed run, 2 bad input, 130/143 stopped by SIGINT/SIGTERM (checkpoint kept).");
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  app.set_version_flag("--version", version_text(), "The version and what this build was made with");
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
  tokenflow::cli::add_moments_command(app);
  tokenflow::cli::add_config_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    const int code = dist::is_root() ? app.exit(e) : 0;
    dist::finalize_world();
    return code;
  } catch (const CLI::CallForAllHelp& e) {
    const int code = dist::is_root() ? app.exit(e) : 0;
    dist::finalize_world();
    return code;
  } catch (const CLI::CallForVersion& e) {
    const int code = dist::is_root() ? app.exit(e) : 0;
    dist::finalize_world();
    return code;
  } catch (const CLI::ParseError& e) {
    if (const std::string hint = unknown_command(app, argc, argv); !hint.empty()) return fail(hint, 2);
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
      if (const std::string hint = unknown_flag(app, argc, argv); !hint.empty()) return fail(hint, 2);
    return fail(std::string("tokenflow: ") + e.what() + " (see tokenflow --help)", 2);
  } catch (...) {
    // A run stopped by SIGINT/SIGTERM ends the same way whatever unwound it (Cancelled from the
    // library, or the figure renderer that the same signal stopped).
    if (const int sig = tokenflow::cli::interrupt_signal()) return fail("tokenflow: interrupted", 128 + sig);
    try {
      throw;
    } catch (const tokenflow::InputError& e) {
      return fail(std::string("tokenflow: ") + e.what(), 2);
    } catch (const tokenflow::Cancelled&) {
      return fail("tokenflow: interrupted", 130);
    } catch (const std::bad_alloc&) {
      // Not bad input (the same config fits a larger machine), so exit code 1, but said plainly.
      return fail("tokenflow: error: out of memory: the run needs more memory than this machine gives "
                  "(" + memory_keys(argc, argv) + " decide it)", 1);
    } catch (const std::exception& e) {
      return fail(std::string("tokenflow: error: ") + e.what(), 1);
    }
  }
  if (dist::is_root()) print_result_lines(app, started);
  dist::finalize_world();
  return 0;
}
