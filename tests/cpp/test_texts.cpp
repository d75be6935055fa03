// Texts with word alignments (tokenflow/texts.hpp): the reader against an independent construction
// of the measures and targets, its refusals, the alignment metrics (tokenflow/tasks.hpp), and
// `tokenflow train` on texts (train, resume bit for bit, a bad line is exit 2).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "test_util.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/model.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/tasks.hpp"
#include "tokenflow/texts.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

// A vector file of `words` words "w0", "w1", ... with random vectors of dimension d.
std::string vector_file(std::mt19937_64& rng, int words, int d) {
  std::normal_distribution<double> normal;
  std::string out;
  for (int w = 0; w < words; ++w) {
    out += fmt::format("w{}", w);
    for (int c = 0; c < d; ++c) out += fmt::format(" {:.17g}", normal(rng));
    out += "\n";
  }
  return out;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The reader's pair built again from its definition (texts.hpp), with plain loops: points are the
// distinct known words, linked or not, in order of first occurrence; target(p, q) is the total
// weight of the links between them over the total weight of kept links; a = N/(N+U) pi* 1 +
// u/(N+U) with N the known occurrences a kept link names, U the others, u_p those of point p.
TEST(Texts, ReadsTextsIntoMeasuresAndTargetsAsDefined) {
  const std::uint64_t seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  const int V = 12, d = 3;
  const WordVectors vectors = parse_word_vectors(vector_file(rng, V, d), "vectors.txt");
  std::uniform_int_distribution<int> word(0, V + 3), length(1, 8);  // w12..w15 have no vector
  std::uniform_real_distribution<double> weight(0.0, 2.0);
  std::string lines;
  std::vector<nlohmann::json> objects;
  while (objects.size() < 20) {
    nlohmann::json o;
    std::vector<std::string> x, y;
    for (int k = length(rng); k > 0; --k) x.push_back(fmt::format("W{}", word(rng)));  // upper case: lowered
    for (int k = length(rng); k > 0; --k) y.push_back(fmt::format("w{}", word(rng)));
    std::set<std::pair<int, int>> links;
    for (int k = length(rng); k > 0; --k)
      links.emplace(std::uniform_int_distribution<int>(0, static_cast<int>(x.size()) - 1)(rng),
                    std::uniform_int_distribution<int>(0, static_cast<int>(y.size()) - 1)(rng));
    std::vector<double> w;
    for (std::size_t k = 0; k < links.size(); ++k) w.push_back(weight(rng));
    bool kept = false;  // a pair with no known positive link is refused: draw again
    std::size_t k = 0;
    for (const auto& [i, j] : links)
      kept |= std::stoi(x[static_cast<std::size_t>(i)].substr(1)) < V && std::stoi(y[static_cast<std::size_t>(j)].substr(1)) < V &&
              w[k++] > 0.0;
    if (!kept) continue;
    std::string xs, ys;
    for (const auto& s : x) xs += s + (rng() % 2 ? ", " : " ");
    for (const auto& s : y) ys += s + " ";
    o["x"] = xs;
    o["y"] = ys;
    o["links"] = nlohmann::json::array();
    for (const auto& [i, j] : links) o["links"].push_back({i, j});
    o["weights"] = w;
    objects.push_back(o);
    lines += o.dump() + (rng() % 3 == 0 ? "\n\n" : "\n");
  }
  const TextPairs got = parse_text_pairs(lines, vectors, "pairs.jsonl");
  ASSERT_EQ(got.pairs.size(), objects.size());
  long unknown_tokens = 0;
  for (std::size_t p = 0; p < objects.size(); ++p) {
    SCOPED_TRACE(fmt::format("seed {} pair {}", seed, p));
    const nlohmann::json& o = objects[p];
    const std::vector<std::string> x = tokenize(o["x"]), y = tokenize(o["y"]);
    for (const auto& s : x) unknown_tokens += !vectors.index.count(s);
    for (const auto& s : y) unknown_tokens += !vectors.index.count(s);
    std::map<std::pair<std::string, std::string>, double> mass;
    double total = 0.0;
    for (std::size_t k = 0; k < o["links"].size(); ++k) {
      const std::string& a = x[o["links"][k][0].get<std::size_t>()];
      const std::string& b = y[o["links"][k][1].get<std::size_t>()];
      const double w = o["weights"][k];
      if (!vectors.index.count(a) || !vectors.index.count(b) || !(w > 0.0)) continue;
      mass[{a, b}] += w;
      total += w;
    }
    // Positions a kept link (both words known, positive weight) names.
    std::set<std::size_t> named_x, named_y;
    for (std::size_t k = 0; k < o["links"].size(); ++k) {
      const std::size_t i = o["links"][k][0], j = o["links"][k][1];
      if (vectors.index.count(x[i]) && vectors.index.count(y[j]) && o["weights"][k].get<double>() > 0.0)
        named_x.insert(i), named_y.insert(j);
    }
    auto points = [&](const std::vector<std::string>& words) {
      std::vector<std::string> out;
      for (const auto& s : words)
        if (std::find(out.begin(), out.end(), s) == out.end() && vectors.index.count(s)) out.push_back(s);
      return out;
    };
    const std::vector<std::string> px = points(x), py = points(y);
    const CouplingPair& pair = got.pairs[p];
    ASSERT_EQ(pair.x.rows(), static_cast<Eigen::Index>(px.size()));
    ASSERT_EQ(pair.y.rows(), static_cast<Eigen::Index>(py.size()));
    for (std::size_t i = 0; i < px.size(); ++i)
      for (int c = 0; c < d; ++c)
        EXPECT_EQ(pair.x(static_cast<Eigen::Index>(i), c),
                  vectors.data[static_cast<std::size_t>(vectors.index.at(px[i]) * d + c)]);
    for (std::size_t j = 0; j < py.size(); ++j)
      for (int c = 0; c < d; ++c)
        EXPECT_EQ(pair.y(static_cast<Eigen::Index>(j), c),
                  vectors.data[static_cast<std::size_t>(vectors.index.at(py[j]) * d + c)]);
    // Each entry is a sum of at most L weights over a sum of at most L (L links), both added in
    // different orders here and in the reader: each sum is off by at most L unit roundoffs
    // (relative), the quotient by one more, so entries agree within (2 L + 1) u relative.
    const double L = static_cast<double>(o["links"].size()), u = 0x1p-53;
    std::set<std::pair<int, int>> sure;
    for (std::size_t i = 0; i < px.size(); ++i)
      for (std::size_t j = 0; j < py.size(); ++j) {
        const auto it = mass.find({px[i], py[j]});
        const double want = it == mass.end() ? 0.0 : it->second / total;
        EXPECT_NEAR(pair.target(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)), want,
                    (2 * L + 1) * u * want);
      }
    for (std::size_t k = 0; k < o["links"].size(); ++k) {
      const auto i = std::find(px.begin(), px.end(), x[o["links"][k][0].get<std::size_t>()]) - px.begin();
      const auto j = std::find(py.begin(), py.end(), y[o["links"][k][1].get<std::size_t>()]) - py.begin();
      if (i < static_cast<long>(px.size()) && j < static_cast<long>(py.size())) sure.emplace(i, j);
    }
    EXPECT_EQ((std::vector<std::pair<int, int>>(sure.begin(), sure.end())), pair.sure);
    EXPECT_EQ(pair.possible, pair.sure);  // no "possible" key: P = S
    // The weights from the definition, with the target's entries as wanted above. The reader's
    // row sums add at most 8 entries, each within (2 L + 1) u relative, in another order (8 u
    // more), and the blend adds 4 roundings: 2 (2 L + 13) u relative for both sides together.
    auto weights = [&](const std::vector<std::string>& words, const std::vector<std::string>& pts,
                       const std::set<std::size_t>& named, bool rows) {
      Eigen::VectorXd linked = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(pts.size())), unaligned = linked;
      double N = 0, U = 0;
      for (std::size_t pos = 0; pos < words.size(); ++pos) {
        const auto at = std::find(pts.begin(), pts.end(), words[pos]) - pts.begin();
        if (at == static_cast<long>(pts.size())) continue;  // unknown
        named.count(pos) ? ++N : (++U, unaligned[at] += 1.0);
      }
      for (const auto& [pq, w] : mass) {
        const std::string& of = rows ? pq.first : pq.second;
        linked[std::find(pts.begin(), pts.end(), of) - pts.begin()] += w / total;
      }
      return Eigen::VectorXd(U == 0 ? linked : (N / (N + U)) * linked + unaligned / (N + U));
    };
    const Eigen::VectorXd a = weights(x, px, named_x, true), b = weights(y, py, named_y, false);
    const double tol = 2 * (2 * L + 13) * u;
    for (Eigen::Index i = 0; i < a.size(); ++i) EXPECT_NEAR(pair.a[i], a[i], tol * a[i]) << "a " << i;
    for (Eigen::Index j = 0; j < b.size(); ++j) EXPECT_NEAR(pair.b[j], b[j], tol * b[j]) << "b " << j;
    EXPECT_NEAR(pair.a.sum(), 1.0, 16 * u);
    EXPECT_NEAR(pair.b.sum(), 1.0, 16 * u);
    const auto unknown_x = std::count_if(x.begin(), x.end(), [&](const auto& w) { return !vectors.index.count(w); });
    if (named_x.size() + static_cast<std::size_t>(unknown_x) == x.size()) {
      // every known word of x linked: a is the target's marginal, bit for bit
      EXPECT_LE((pair.a - pair.target.rowwise().sum()).cwiseAbs().maxCoeff(), 0.0);
    }
  }
  EXPECT_EQ(got.unknown_tokens, unknown_tokens) << "seed " << seed;
}

// Every defect: InputError naming the file, the line and the key.
TEST(Texts, RefusesEveryDefectNamingTheFileTheLineAndTheKey) {
  std::mt19937_64 rng(testing::fresh_seed());
  const WordVectors vectors = parse_word_vectors(vector_file(rng, 4, 2), "v.txt");
  const std::string good = R"({"x": "w0 w1", "y": "w1 w2 w3", "links": [[0, 0], [1, 2]]})";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"{\"x\": \"w0\", ", "line 2: not JSON"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0]], "weights": [1e315]})", "line 2: not JSON: number overflow"},
      {"[1, 2]", "line 2: is not a JSON object"},
      {R"({"y": "w0", "links": [[0, 0]]})", "line 2: x: is missing"},
      {R"({"x": 3, "y": "w0", "links": [[0, 0]]})", "line 2: x: must be a string"},
      {R"({"x": " ,. ", "y": "w0", "links": [[0, 0]]})", "line 2: x: has no word"},
      {R"({"x": "w0", "y": "w0"})", "line 2: links: is missing"},
      {R"({"x": "w0", "y": "w0", "links": []})", "line 2: links: is empty"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 1]]})", "line 2: links: entry 0: j = 1 is out of range"},
      {R"({"x": "w0", "y": "w0", "links": [[-1, 0]]})", "line 2: links: entry 0: i = -1 is out of range"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0.5]]})", "line 2: links: entry 0 is [0,0.5]"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0], [0, 0]]})", "line 2: links: entry 1: the link [0, 0] is given twice"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0]], "weights": [-0.5]})", "line 2: weights: entry 0 is -0.5"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0]], "weights": ["1"]})", "line 2: weights: entry 0 is \"1\""},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0]], "weights": [1, 2]})", "line 2: weights: must be a list of 1"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0]], "weights": [0]})", "line 2: weights: are all zero"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0]], "possible": [[1, 0]]})", "line 2: possible: entry 0: i = 1"},
      {R"({"x": "w0", "y": "w0", "links": [[0, 0]], "link": []})", "line 2: link: unknown key"},
      {R"({"x": "w0 zz", "y": "w0", "links": [[1, 0]]})", "line 2: links: no link is left"},
  };
  for (const auto& [line, expected] : cases) {
    SCOPED_TRACE(line);
    try {
      parse_text_pairs(good + "\n" + line + "\n", vectors, "pairs.jsonl");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.source(), "pairs.jsonl");
      EXPECT_NE(std::string(e.what()).find("pairs.jsonl: " + expected), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_text_pairs("\n \n", vectors, "pairs.jsonl"), InputError);  // no pair
  // A NaN in the vectors: the vector reader's refusal (file and line).
  try {
    parse_word_vectors("w0 1 2\nw1 nan 2\n", "v.txt");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("v.txt: line 2: 'nan' is not a finite number"), std::string::npos) << e.what();
  }
}

// Unknown words: counted (occurrences, distinct, first few), their links left out.
TEST(Texts, ReportsUnknownWords) {
  std::mt19937_64 rng(testing::fresh_seed());
  const WordVectors vectors = parse_word_vectors(vector_file(rng, 3, 2), "v.txt");
  const TextPairs t = parse_text_pairs(
      R"({"x": "the w0 of w1 the", "y": "w1 a w0", "links": [[1, 2], [3, 0], [0, 1]]})"
      "\n",
      vectors, "p.jsonl");
  EXPECT_EQ(t.unknown_tokens, 4);
  EXPECT_EQ(t.unknown_words, 3);
  EXPECT_EQ(t.unknown_first, (std::vector<std::string>{"the", "of", "a"}));
  EXPECT_EQ(t.dropped_links, 1);
  EXPECT_EQ(describe_unknown(t), "3 unknown words (4 occurrences, 1 link left out): the, of, a");
  ASSERT_EQ(t.pairs.size(), 1u);
  EXPECT_EQ(t.pairs[0].x.rows(), 2);  // w0, w1
  EXPECT_EQ(t.pairs[0].sure, (std::vector<std::pair<int, int>>{{0, 1}, {1, 0}}));
}

// AER, precision and recall on a plan worked by hand, and on exact plans of random permutations.
TEST(Texts, AlignmentScoresFollowOchAndNey) {
  RowMatrix plan(3, 4);
  plan << 0.30, 0.01, 0.02, 0.00,  // row 0: max at column 0, whose max is row 0: a link
      0.01, 0.02, 0.20, 0.15,      // row 1: max at column 2, whose max is row 2 (0.25): no link
      0.01, 0.01, 0.25, 0.03;      // row 2: max at column 2, whose max is row 2: a link
  const std::vector<std::pair<int, int>> sure{{0, 0}, {1, 3}}, possible{{0, 0}, {1, 3}, {2, 2}};
  const AlignmentCounts c = alignment_counts(plan, sure, possible);
  EXPECT_EQ(c.predicted, 2);  // (0, 0), (2, 2)
  EXPECT_EQ(c.sure, 2);
  EXPECT_EQ(c.predicted_sure, 1);
  EXPECT_EQ(c.predicted_possible, 2);
  const AlignmentScores s = alignment_scores(c);
  EXPECT_DOUBLE_EQ(s.precision, 1.0);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.aer, 1.0 - 3.0 / 4.0);
  EXPECT_TRUE(std::isnan(alignment_scores(AlignmentCounts{}).aer));

  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    std::vector<int> perm(static_cast<std::size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    RowMatrix pi = RowMatrix::Constant(n, n, 0.01);
    std::vector<std::pair<int, int>> links;
    for (int i = 0; i < n; ++i) pi(i, perm[static_cast<std::size_t>(i)]) = 1.0, links.emplace_back(i, perm[static_cast<std::size_t>(i)]);
    const AlignmentScores exact = alignment_scores(alignment_counts(pi, links, links));
    EXPECT_EQ(exact.aer, 0.0);
    EXPECT_EQ(exact.precision, 1.0);
    EXPECT_EQ(exact.recall, 1.0);
  }
}

// An unaligned word (column 2, in no gold link): the plan's link of it is a wrong prediction, and
// its mass is off the gold links; a link given twice counts once in the link mass.
TEST(Texts, UnalignedWordsCountAgainstPrecisionAndLinkMass) {
  RowMatrix plan(2, 3);
  plan << 0.30, 0.00, 0.10,  // row 0: max at column 0, whose max is row 0: a link (gold)
      0.00, 0.20, 0.25;      // row 1: max at column 2 (unaligned), whose max is row 1: a link (wrong)
  const std::vector<std::pair<int, int>> gold{{0, 0}, {1, 1}};
  const AlignmentScores s = alignment_scores(alignment_counts(plan, gold, gold));
  EXPECT_DOUBLE_EQ(s.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.aer, 0.5);
  EXPECT_DOUBLE_EQ(link_mass(plan, gold), 0.5 / 0.85);
  EXPECT_DOUBLE_EQ(link_mass(plan, {{1, 1}, {0, 0}, {1, 1}}), 0.5 / 0.85);
  EXPECT_TRUE(std::isnan(link_mass(RowMatrix::Zero(2, 3), gold)));
  // A plan that leaves the unaligned word alone: both links found, and all but its mass on them.
  plan(1, 2) = 0.05;
  const AlignmentScores t = alignment_scores(alignment_counts(plan, gold, gold));
  EXPECT_EQ(t.aer, 0.0);
  EXPECT_DOUBLE_EQ(link_mass(plan, gold), 0.5 / 0.65);
}

// `tokenflow train` on texts: AER in summary.json and metrics.csv, the unknown words reported on
// stderr and in summary.json, resume bit for bit, a bad line exit 2 with one line and no outputs.
TEST(CliTrain, TextsTrainResumeAndRefuseBadLines) {
  std::mt19937_64 rng(testing::fresh_seed());
  const fs::path dir = testing::temp_dir("cli-texts");
  write(dir / "vectors.txt", vector_file(rng, 10, 3));
  auto pairs = [&](int count) {
    std::string out;
    for (int p = 0; p < count; ++p) {
      const int n = 2 + static_cast<int>(rng() % 4);
      std::vector<int> perm(static_cast<std::size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      nlohmann::json o;
      std::string x = "the", y;
      for (int i = 0; i < n; ++i) x += fmt::format(" w{}", i);
      for (int j = 0; j < n; ++j) y += fmt::format("w{} ", perm[static_cast<std::size_t>(j)]);
      if (rng() % 2) y += "w9";  // an unaligned word (after the linked ones: positions unchanged)
      o["x"] = x;
      o["y"] = y;
      o["links"] = nlohmann::json::array();
      for (int j = 0; j < n; ++j) o["links"].push_back({perm[static_cast<std::size_t>(j)] + 1, j});
      out += o.dump() + "\n";
    }
    return out;
  };
  write(dir / "train.jsonl", pairs(8));
  write(dir / "test.jsonl", pairs(3));
  const std::string common = "train --set task.kind=texts --set task.path=" + (dir / "train.jsonl").string() +
                             " --set task.test_path=" + (dir / "test.jsonl").string() +
                             " --set task.vectors=" + (dir / "vectors.txt").string() +
                             " --set model.width=8 --set model.layers=1 --set model.heads=2 --set model.k=4"
                             " --set model.sinkhorn_iters=8 --set train.batch=4 --set train.lr=1e-2"
                             " --set train.checkpoint_every=3"
                             " --set train.schedule=\\\"constant\\\"";  // steps grows on resume: kept out of the hash
  auto r = run_cli(common + " --set train.steps=6 --out " + (dir / "straight").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("1 unknown word (3 occurrences, 0 links left out): the"), std::string::npos)
      << r.stderr_text;
  const auto s = testing::read_summary(dir / "straight");
  EXPECT_EQ(s["task"], "texts");
  EXPECT_EQ(s["test_pairs"], 3);
  for (const char* key : {"test_aer", "test_aer_untrained", "test_aer_independent", "test_precision", "test_recall",
                          "test_link_mass", "test_link_mass_untrained", "test_link_mass_independent"}) {
    ASSERT_TRUE(s[key].is_number()) << key;
    EXPECT_GE(s[key].get<double>(), 0.0) << key;
    EXPECT_LE(s[key].get<double>(), 1.0) << key;
  }
  EXPECT_EQ(s["notes"].size(), 2u);
  const std::string csv = testing::read_file_bytes(dir / "straight" / "metrics.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "step,loss,test_w1,seconds,test_loss,test_accuracy,test_aer,test_precision,test_recall,test_link_mass");
  r = run_cli(common + " --set train.steps=3 --out " + (dir / "resumed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  r = run_cli("train --resume --set train.steps=6 --out " + (dir / "resumed").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(load_model(dir / "resumed" / "model.bin").params, load_model(dir / "straight" / "model.bin").params);
  const auto resumed = testing::read_summary(dir / "resumed");
  for (const char* key : {"test_w1", "test_aer", "test_aer_untrained", "test_recall_independent", "test_link_mass",
                          "test_link_mass_untrained", "test_link_mass_independent"})
    EXPECT_EQ(resumed[key], s[key]) << key;
  // The link masses of the metrics rows (the last column) written before the resume come back from
  // the checkpoint: every row has one (a row without it would be empty, NaN).
  auto last_column = [](const std::string& text) {
    std::vector<std::string> out;
    for (std::size_t pos = text.find('\n') + 1; pos < text.size();) {
      const std::size_t end = text.find('\n', pos);
      const std::string line = text.substr(pos, end - pos);
      out.push_back(line.substr(line.rfind(',') + 1));
      pos = end + 1;
    }
    return out;
  };
  for (const std::string& path : {(dir / "straight" / "metrics.csv").string(), (dir / "resumed" / "metrics.csv").string()}) {
    const std::vector<std::string> masses = last_column(testing::read_file_bytes(path));
    EXPECT_GE(masses.size(), 2u) << path;
    for (const std::string& v : masses) {
      ASSERT_FALSE(v.empty()) << path;
      EXPECT_GT(std::stod(v), 0.0) << path;
      EXPECT_LE(std::stod(v), 1.0) << path;
    }
  }

  // The checkpoint records the data's hashes: resuming with a changed file is exit 2 naming it.
  write(dir / "vectors.txt", testing::read_file_bytes(dir / "vectors.txt") + "extra 1 2 3\n");
  r = run_cli("train --resume --set train.steps=9 --out " + (dir / "resumed").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "vectors.txt").string() + ": task.vectors: changed since the checkpoint"),
            std::string::npos)
      << r.stderr_text;
  EXPECT_EQ(testing::read_summary(dir / "resumed")["steps"], 6);  // untouched

  write(dir / "test.jsonl", pairs(2) + R"({"x": "w0 w1", "y": "w1", "links": [[0, 1]]})" + "\n");
  r = run_cli(common + " --set train.steps=1 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "test.jsonl").string() + ": line 3: links: entry 0: j = 1 is out of range"),
            std::string::npos)
      << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_FALSE(fs::exists(dir / "bad"));
  r = run_cli(common + " --set task.test_path= --set train.steps=1 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  r = run_cli("train --set task.vectors=v.txt --set train.steps=1 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("task.vectors: is read only for kind = \"texts\""), std::string::npos) << r.stderr_text;
}

}  // namespace
}  // namespace tokenflow
