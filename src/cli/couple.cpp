// tokenflow couple: a trained Sinkhorn Transformer's coupling of two measures (plan.npy), from
// .npy files or from two texts and a word-vector file.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "commands.hpp"
#include "common.hpp"
#include "text_args.hpp"
#include "tokenflow/echo.hpp"
#include "tokenflow/embed.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/model.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/measure.hpp"

namespace tokenflow::cli {

namespace {

struct CoupleArgs {
  std::string model, x, y, a, b, vectors, out;
  TextArgument x_text{"", "", "--x-text", "--x-text-file"}, y_text{"", "", "--y-text", "--y-text-file"};
  int top = 10;
  tokenflow::CoupleOptions coupling;
};

// Checks which inputs were given: two texts and --vectors, or --x and --y arrays (true: texts).
bool couple_from_texts(const CoupleArgs& o) {
  const bool texts = given(o.x_text) || given(o.y_text);
  if (texts && (!given(o.x_text) || !given(o.y_text)))
    throw InputError("", given(o.x_text) ? "--y-text" : "--x-text",
                     "both texts are needed (--x-text or --x-text-file, --y-text or --y-text-file)");
  if (texts && o.vectors.empty())
    throw InputError("", "--vectors", "is needed with texts (--x-text/--y-text, --x-text-file/--y-text-file)");
  if (texts && (!o.x.empty() || !o.y.empty() || !o.a.empty() || !o.b.empty()))
    throw InputError("", "--x-text", "give either texts or --x/--y arrays, not both");
  if (!texts && (o.x.empty() || o.y.empty()))
    throw InputError("", o.x.empty() ? "--x" : "--y",
                     "is required (or --x-text, --y-text and --vectors)");
  return texts;
}

// The two measures: points x, y and weights a, b (empty: uniform); from texts, their words too.
struct CoupleMeasures {
  Points<double> x, y;
  Eigen::VectorXd a, b;
  TextMeasure tx, ty;
};

CoupleMeasures read_couple_measures(const CoupleArgs& o, const SinkhornTransformer& model, bool texts) {
  CoupleMeasures m;
  if (texts) {
    const WordVectors vectors = read_word_vectors(o.vectors);
    if (vectors.dim != model.config.d)
      throw InputError(o.vectors, "--vectors",
                       fmt::format("has vectors of dimension {}, the model takes {}", vectors.dim,
                                   model.config.d));
    m.tx = text_measure(vectors, o.x_text);
    m.ty = text_measure(vectors, o.y_text);
    m.x = m.tx.points;
    m.y = m.ty.points;
    m.a = m.tx.weights;
    m.b = m.ty.weights;
  } else {
    m.x = read_points(o.x, "--x");
    m.y = read_points(o.y, "--y");
    if (!o.a.empty()) m.a = read_vector(o.a, "--a", m.x.rows());
    if (!o.b.empty()) m.b = read_vector(o.b, "--b", m.y.rows());
  }
  return m;
}

// The model's coupling of the measures; a solve the arithmetic could not carry (NaN costs) sets
// `failure` instead. Bad input names the file it came from.
Coupling solve_coupling(const CoupleArgs& o, const SinkhornTransformer& model, const CoupleMeasures& m, bool texts,
                        std::string& failure) {
  Coupling coupling;
  try {
    coupling = couple_measures(model, m.x, m.y, m.a, m.b, o.coupling);
  } catch (const NumericalFailure& e) {
    failure = e.what();
  } catch (const InputError& e) {
    // Name the file the problem came from.
    const std::string& key = e.key();
    const std::string file = key == "x"   ? o.x
                             : key == "y" ? o.y
                             : key == "a" ? o.a
                             : key == "b" ? o.b
                             : key == "tol" || key == "max_iter" ? std::string()
                                          : o.model;
    throw InputError(texts || !e.source().empty() ? e.source() : file, "--" + key, e.detail());
  }
  return coupling;
}

// Texts: the `top` strongest links (the entries of pi in decreasing order, with the share of the
// row's mass mu_i), printed and set in s with the words and the unknown words (printed on stderr).
void add_text_links(const RowMatrix& plan, const Eigen::VectorXd& mu, const TextMeasure& tx, const TextMeasure& ty,
                    int top, nlohmann::json& s) {
  std::vector<std::pair<Eigen::Index, Eigen::Index>> entries;
  for (Eigen::Index i = 0; i < plan.rows(); ++i)
    for (Eigen::Index j = 0; j < plan.cols(); ++j) entries.emplace_back(i, j);
  std::sort(entries.begin(), entries.end(), [&](const auto& p, const auto& q) {
    return plan(p.first, p.second) > plan(q.first, q.second);
  });
  entries.resize(
      std::min<std::size_t>(entries.size(), static_cast<std::size_t>(std::max(0, top))));
  nlohmann::json links = nlohmann::json::array();
  std::cout << "strongest links (pi_ij, share of the word's mass):\n";
  for (const auto& [i, j] : entries) {
    const double share = plan(i, j) / mu[i];
    const auto& wx = tx.words[static_cast<std::size_t>(i)];
    const auto& wy = ty.words[static_cast<std::size_t>(j)];
    links.push_back({{"x", wx}, {"y", wy}, {"pi", plan(i, j)}, {"share", share}});
    std::cout << fmt::format("  {:>16} -> {:<16} {:.4g}  ({:.3g}%)\n", wx, wy, plan(i, j),
                             100.0 * share);
  }
  s["links"] = links;
  s["x_words"] = tx.words;
  s["y_words"] = ty.words;
  s["unknown"] = {{"x", tx.unknown}, {"y", ty.unknown}};
  for (const auto* t : {&tx, &ty})
    if (!t->unknown.empty()) {
      std::cerr << fmt::format("tokenflow: unknown words in {} left out: {}\n",
                               t == &tx ? "--x-text" : "--y-text", echo_list(t->unknown));
    }
}

void run_couple(const CoupleArgs& o) {
  Stopwatch clock;
  const bool texts = couple_from_texts(o);
  const SinkhornTransformer model = load_model(o.model);
  const CoupleMeasures measures = read_couple_measures(o, model, texts);
  std::string failure;  // a solve the arithmetic could not carry (NaN costs): status "failed"
  const Coupling coupling = solve_coupling(o, model, measures, texts, failure);
  const RowMatrix& plan = coupling.plan;
  const Eigen::VectorXd& a = measures.a;
  const Eigen::VectorXd& b = measures.b;
  OutputDir out(o.out, {"couple", {"summary.json"}, {}});
  const Eigen::VectorXd mu =
      a.size() ? normalized_weights(a) : Eigen::VectorXd::Constant(measures.x.rows(), 1.0 / measures.x.rows());
  const Eigen::VectorXd nu =
      b.size() ? normalized_weights(b) : Eigen::VectorXd::Constant(measures.y.rows(), 1.0 / measures.y.rows());
  nlohmann::json s;
  s["command"] = "couple";
  // The plan must be a coupling before it is written (ot_solve.hpp, kCouplingColumnTol).
  // An unbalanced model's plan (model.marginal_penalty) has columns b e^{-g/rho}, not b: no column check.
  const double column_tol = final_layer_config(model).unbalanced() ? INFINITY : kCouplingColumnTol;
  if (const std::string defect = failure.empty() ? coupling_defect(plan, mu, nu, INFINITY, column_tol) : failure;
      !defect.empty()) {
    s["status"] = "failed";
    s["reason"] = defect;
    s["model"] = o.model;
    s["wall_seconds"] = clock.seconds();
    write_summary(out, s);
    out.commit();
    throw std::runtime_error("couple failed: " + defect + " (status \"failed\" in " + o.out + "/summary.json)");
  }
  write_npy(out.staged("plan.npy"), plan.data(),
            {static_cast<std::size_t>(plan.rows()), static_cast<std::size_t>(plan.cols())});
  // An unconverged solve is a result, said so (status "max_iter", a warning), as in tokenflow ot.
  const bool stopped_early = !coupling.unrolled && !coupling.converged;
  s["status"] = stopped_early ? "max_iter" : "finished";
  s["plan_kind"] = coupling.unrolled ? "unrolled" : "converged";
  s["iterations"] = coupling.iterations;
  if (!coupling.unrolled) {
    s["converged"] = coupling.converged;
    s["tol"] = o.coupling.tol;
  }
  s["n"] = plan.rows();
  s["m"] = plan.cols();
  s["d"] = model.config.d;
  s["model"] = o.model;
  s["marginal_error"] = coupling.marginal_error;
  // The hard assignment of each row (its largest entry), for matching-like uses.
  std::vector<Eigen::Index> argmax(static_cast<std::size_t>(plan.rows()));
  for (Eigen::Index i = 0; i < plan.rows(); ++i)
    plan.row(i).maxCoeff(&argmax[static_cast<std::size_t>(i)]);
  s["assignment"] = argmax;
  if (texts) add_text_links(plan, mu, measures.tx, measures.ty, o.top, s);
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
  out.commit();
  if (stopped_early)
    std::cerr << fmt::format("tokenflow: warning: couple: Sinkhorn stopped at --max-iter {} with marginal error {:g} "
                             "above --tol {:g}: plan.npy is not a coupling to that tolerance\n",
                             o.coupling.max_iter, coupling.marginal_error, o.coupling.tol);
}

}  // namespace

void add_couple_command(CLI::App& app) {
  auto o = std::make_shared<CoupleArgs>();
  const CoupleOptions defaults;
  CLI::App* cmd = app.add_subcommand(
      "couple", "The coupling of two measures by a trained Sinkhorn Transformer");
  cmd->add_option("--model", o->model, "model.bin written by tokenflow train")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--x", o->x, "Points of the first measure (n x d .npy)");
  cmd->add_option("--y", o->y, "Points of the second measure (m x d .npy)");
  cmd->add_option("--a", o->a, "Weights of the first measure (n .npy; default uniform)");
  cmd->add_option("--b", o->b, "Weights of the second measure (m .npy; default uniform)");
  cmd->add_option("--x-text", o->x_text.text, "The first measure as a text, given as a string (needs --vectors)");
  cmd->add_option("--y-text", o->y_text.text, "The second measure as a text, given as a string (needs --vectors)");
  cmd->add_option("--x-text-file", o->x_text.file, "The first measure's text from a file (instead of --x-text)");
  cmd->add_option("--y-text-file", o->y_text.file, "The second measure's text from a file (instead of --y-text)");
  cmd->add_option("--vectors", o->vectors,
                  "Word vectors (word2vec/GloVe text format) for the texts");
  cmd->add_option("--top", o->top, "Links to print for texts (default 10)");
  cmd->add_flag("--unrolled", o->coupling.unrolled,
                "The training-time plan (model.sinkhorn_iters unrolled iterations; rows only approximately a) "
                "instead of the converged entropic-OT plan of the learned cost");
  cmd->add_option("--tol", o->coupling.tol, with_default("Converged plan: l1 marginal error to reach", defaults.tol));
  cmd->add_option("--max-iter", o->coupling.max_iter, with_default("Converged plan: Sinkhorn iterations at most", defaults.max_iter));
  cmd->add_option("--out", o->out, kOutHelp)->required();
  cmd->footer(
      "Outputs: plan.npy (n x m), summary.json (plan_kind converged or unrolled, marginal_error, iterations, "
      "assignment; links and words for texts).");
  cmd->callback([o] { run_couple(*o); });
}

}  // namespace tokenflow::cli
