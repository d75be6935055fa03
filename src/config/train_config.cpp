// The keys of `tokenflow train`, written once, and the readers and TOML writer made from them
// (tokenflow/train_config.hpp).
#include "tokenflow/train_config.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>

#include "tokenflow/dataset.hpp"
#include "tokenflow/embed.hpp"
#include "tokenflow/texts.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/records.hpp"
#include "tokenflow/tasks.hpp"

namespace tokenflow {

namespace {
constexpr double kMaxShape = 1 << 20;  // model shapes (a bound far above any model that fits)
constexpr double kMaxPoints = 100000;  // tokens of one text of a task
}  // namespace

// ---- the schemas --------------------------------------------------------------------------------
// Each entry: {{key, type, default, bounds, choices, unit, meaning}, field, default_from, hashed}.
const std::vector<Key<TaskSpec>>& task_schema() {
  using T = TaskSpec;
  static const std::vector<Key<T>> keys{
      {{"task.kind", KeyType::string, "\"matching\"", {}, task_kind_names(), "",
        "the coupling task the model learns (docs/sinkhorn-transformer.md)"},
       [](T& t) -> FieldRef { return &t.kind; }},
      {{"task.n", KeyType::integer, "16", closed(1, kMaxPoints), {}, "tokens", "size of the first text (the largest drawn)"},
       [](T& t) -> FieldRef { return &t.n; }},
      {{"task.m", KeyType::integer, "task.n", closed(1, kMaxPoints), {}, "tokens",
        "size of the second text (= n for matching and sorting)"},
       [](T& t) -> FieldRef { return &t.m; }, [](T& t) { t.m = t.n; }},
      {{"task.min_n", KeyType::integer, "task.n", closed(1, kMaxPoints), {}, "tokens",
        "sizes of the first text are drawn in [min_n, n]"},
       [](T& t) -> FieldRef { return &t.min_n; }, [](T& t) { t.min_n = t.n; }},
      {{"task.min_m", KeyType::integer, "task.m", closed(1, kMaxPoints), {}, "tokens",
        "sizes of the second text are drawn in [min_m, m] (= min_n for matching and sorting)"},
       [](T& t) -> FieldRef { return &t.min_m; },
       [](T& t) { t.min_m = t.kind == "matching" || t.kind == "sorting" ? t.min_n : t.m; }},
      {{"task.d", KeyType::integer, "2 (sorting: 1)", closed(1, 4096), {}, "", "dimension of the tokens (dataset: the files'; texts: the vectors')"},
       [](T& t) -> FieldRef { return &t.d; }, [](T& t) { t.d = t.kind == "sorting" ? 1 : 2; }},
      {{"task.noise", KeyType::number, "0.02", at_least(0), {}, "", "matching: noise added to the moved copy"},
       [](T& t) -> FieldRef { return &t.noise; }},
      {{"task.scale_range", KeyType::number_list, "[0.5, 2.0]", positive(), {}, "",
        "matching, entropic-ot: the copy's scale is drawn in [lo, hi]"},
       [](T& t) -> FieldRef { return PairField{&t.scale_min, &t.scale_max}; }},
      {{"task.shift", KeyType::number, "1.0", at_least(0), {}, "", "matching, entropic-ot: size of the copy's shift"},
       [](T& t) -> FieldRef { return &t.shift; }},
      {{"task.p", KeyType::integer, "1", closed(1, 2), {}, "", "entropic-ot: the cost |x - y|^p"},
       [](T& t) -> FieldRef { return &t.p; }},
      {{"task.target_epsilon", KeyType::number, "0.1", positive(), {}, "", "entropic-ot: epsilon of the target plan"},
       [](T& t) -> FieldRef { return &t.target_epsilon; }},
      {{"task.random_weights", KeyType::boolean, "false", {}, {}, "",
        "entropic-ot, whitened-ot: random token weights instead of uniform ones"},
       [](T& t) -> FieldRef { return &t.random_weights; }},
      // Written (and hashed) for datasets only: the other kinds keep the TOML and the checkpoints
      // they had before the key existed.
      {{"task.path", KeyType::path, "(none)", {}, {}, "",
        "dataset: folder of train/*.npz and test/*.npz, one pair a file (x, y, target; a, b optional); "
        "texts: the training pairs, JSON lines {\"x\", \"y\", \"links\"}"},
       [](T& t) -> FieldRef { return &t.path; }, nullptr, [](const T& t) { return task_reads_pairs(t); }},
      {{"task.test_path", KeyType::path, "(none)", {}, {}, "", "texts: the held-out pairs (JSON lines)"},
       [](T& t) -> FieldRef { return &t.test_path; }, nullptr, [](const T& t) { return t.kind == "texts"; }},
      {{"task.vectors", KeyType::path, "(none)", {}, {}, "",
        "texts: word-vector file (word2vec/GloVe text, as embed reads it)"},
       [](T& t) -> FieldRef { return &t.vectors; }, nullptr, [](const T& t) { return t.kind == "texts"; }}};
  return keys;
}

const std::vector<Key<ModelConfig>>& model_schema() {
  using M = ModelConfig;
  static const std::vector<Key<M>> keys{
      {{"model.d", KeyType::integer, "task.d", closed(1, 4096), {}, "", "the tokens' dimension (the task's)", true},
       [](M& m) -> FieldRef { return &m.d; }},
      {{"model.width", KeyType::integer, "64", closed(1, kMaxShape), {}, "", "width of the encoders' residual stream"},
       [](M& m) -> FieldRef { return &m.width; }},
      {{"model.layers", KeyType::integer, "2", at_least(0), {}, "", "transformer blocks per encoder"},
       [](M& m) -> FieldRef { return &m.layers; }},
      {{"model.heads", KeyType::integer, "4", closed(1, kMaxShape), {}, "", "attention heads (must divide width)"},
       [](M& m) -> FieldRef { return &m.heads; }},
      {{"model.k", KeyType::integer, "32", closed(1, kMaxShape), {}, "", "dimension of the final Q and K features"},
       [](M& m) -> FieldRef { return &m.k; }},
      {{"model.mlp_ratio", KeyType::integer, "4", closed(1, kMaxShape), {}, "", "MLP hidden width / width"},
       [](M& m) -> FieldRef { return &m.mlp_ratio; }},
      {{"model.epsilon", KeyType::number, "1.0", positive(), {}, "", "epsilon of the final Sinkhorn layer"},
       [](M& m) -> FieldRef { return &m.sinkhorn.epsilon; }},
      {{"model.sinkhorn_iters", KeyType::integer, "30", closed(1, kMaxShape), {}, "iterations",
        "Sinkhorn iterations of the final layer (unrolled in training)"},
       [](M& m) -> FieldRef { return &m.sinkhorn_iters; }},
      {{"model.share_encoders", KeyType::boolean, "false", {}, {}, "", "one encoder for both texts"},
       [](M& m) -> FieldRef { return &m.share_encoders; }},
      // The final layer's training mode; its keys enter the config hash (checkpoint.bin) only for
      // implicit models, so unrolled runs keep the hash, and the checkpoints, they had before.
      {{"model.sinkhorn_grad", KeyType::string, "\"unrolled\"", {}, {"unrolled", "implicit"}, "",
        "the final layer in training: unrolled iterations, or the converged plan with implicit gradients"},
       [](M& m) -> FieldRef { return &m.sinkhorn_grad; }, nullptr, [](const M& m) { return m.implicit(); }},
      {{"model.sinkhorn_tol", KeyType::number, "1e-9", positive(), {}, "",
        "implicit: l1 marginal error of the final layer's solve"},
       [](M& m) -> FieldRef { return &m.sinkhorn.tol; }, nullptr, [](const M& m) { return m.implicit(); }},
      {{"model.sinkhorn_max_iter", KeyType::integer, std::to_string(kSinkhornMaxIter), closed(1, 100000000), {}, "iterations",
        "implicit: iterations of the final layer's solve at most"},
       [](M& m) -> FieldRef { return &m.sinkhorn.max_iter; }, nullptr, [](const M& m) { return m.implicit(); }},
      // Hashed only when finite: balanced runs keep the hash, and the checkpoints, they had before.
      {{"model.marginal_penalty", KeyType::number, "inf", {0.0, kNoLimit, true, false}, {}, "",
        "unbalanced final layer: KL penalty rho on each marginal (POT's reg_m); left out: balanced"},
       [](M& m) -> FieldRef { return &m.sinkhorn.marginal_penalty; }, nullptr,
       [](const M& m) { return m.unbalanced(); }},
      // Hashed only when on: the runs before it keep their hash and checkpoints.
      {{"model.learn_marginal_penalty", KeyType::boolean, "false", {}, {}, "",
        "learn the final layer's marginal penalty from the data, starting from model.marginal_penalty "
        "(left out: from model.epsilon)"},
       [](M& m) -> FieldRef { return &m.learn_marginal_penalty; }, nullptr,
       [](const M& m) { return m.learn_marginal_penalty; }}};
  return keys;
}

const std::vector<Key<TrainSpec>>& train_spec_schema() {
  using S = TrainSpec;
  static const std::vector<Key<S>> keys{
      {{"train.steps", KeyType::integer, "3000", at_least(0), {}, "steps", "optimizer steps"},
       [](S& s) -> FieldRef { return &s.steps; }, nullptr,
       // The trajectory of the steps two runs share depends on steps only through the schedule.
       [](const S& s) { return s.schedule == "cosine"; }},
      {{"train.batch", KeyType::integer, "32", at_least(1), {}, "pairs", "pairs of texts per step"},
       [](S& s) -> FieldRef { return &s.batch; }},
      {{"train.lr", KeyType::number, "1e-3", {0, 1e6, true, false}, {}, "", "AdamW learning rate"},
       [](S& s) -> FieldRef { return &s.lr; }},
      {{"train.seed", KeyType::integer, "0", at_least(0), {}, "", "seed of the initialization and the pairs"},
       [](S& s) -> FieldRef { return &s.seed; }},
      {{"train.test_pairs", KeyType::integer, "128", at_least(1), {}, "pairs", "held-out pairs of the test metrics (dataset: the files of test/; texts: the lines of task.test_path)"},
       [](S& s) -> FieldRef { return &s.test_pairs; }},
      {{"train.weight_decay", KeyType::number, "0.0", closed(0, 1e6), {}, "", "AdamW's decoupled decay of the weight matrices"},
       [](S& s) -> FieldRef { return &s.weight_decay; }},
      {{"train.beta1", KeyType::number, "0.9", {0, 1, false, true}, {}, "", "AdamW's first-moment decay"},
       [](S& s) -> FieldRef { return &s.beta1; }},
      {{"train.beta2", KeyType::number, "0.999", {0, 1, false, true}, {}, "", "AdamW's second-moment decay"},
       [](S& s) -> FieldRef { return &s.beta2; }},
      {{"train.warmup", KeyType::integer, "min(100, steps / 10)", at_least(0), {}, "steps",
        "linear warm-up of the learning rate"},
       [](S& s) -> FieldRef { return &s.warmup; }},
      {{"train.schedule", KeyType::string, "\"cosine\"", {}, {"constant", "cosine"}, "",
        "learning rate schedule (cosine: to lr / 10 at the last step)"},
       [](S& s) -> FieldRef { return &s.schedule; }},
      {{"train.grad_clip", KeyType::number, "1.0", closed(0, 1e300), {}, "", "clip the gradient's 2-norm to this (0: off)"},
       [](S& s) -> FieldRef { return &s.grad_clip; }},
      {{"train.eval_every", KeyType::integer, "0 (20 rows)", at_least(0), {}, "steps", "test metrics every k steps"},
       [](S& s) -> FieldRef { return &s.eval_every; }, nullptr, [](const S&) { return false; }},
      {{"train.checkpoint_every", KeyType::integer, "0 (never)", at_least(0), {}, "steps",
        "checkpoint every k steps (continue with --resume)"},
       [](S& s) -> FieldRef { return &s.checkpoint_every; }, nullptr, [](const S&) { return false; }}};
  return keys;
}

namespace {
const KeySpec& dtype_key() {
  static const KeySpec key{"dtype", KeyType::string, "\"f64\"", {}, {"f64", "f32"}, "",
                           "training arithmetic (evaluation is always f64)"};
  return key;
}

template <class S>
std::vector<std::string> names_of(const std::vector<Key<S>>& keys) {
  return key_names(specs_of(keys));
}
}  // namespace

std::vector<KeySpec> train_command_keys() {
  std::vector<KeySpec> keys{dtype_key()};
  for (const auto& k : specs_of(task_schema())) keys.push_back(k);
  for (const auto& k : specs_of(model_schema())) keys.push_back(k);
  for (const auto& k : specs_of(train_spec_schema())) keys.push_back(k);
  return keys;
}

const std::vector<std::string>& task_keys() {
  static const std::vector<std::string> keys = names_of(task_schema());
  return keys;
}

const std::vector<std::string>& model_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& spec : specs_of(model_schema()))
      if (!spec.hidden) k.push_back(spec.key);
    return k;
  }();
  return keys;
}

const std::vector<std::string>& train_keys() {
  static const std::vector<std::string> keys = key_names(train_command_keys());
  return keys;
}

// ---- readers ------------------------------------------------------------------------------------
TaskSpec read_task_spec(const Config& c) {
  TaskSpec t;
  auto fail = [&](const std::string& key, const std::string& what) -> void {
    throw InputError(c.source_of(key), key, what);
  };
  read_keys(c, task_schema(), t);
  for (std::string* path : {&t.path, &t.test_path, &t.vectors})
    if (!path->empty()) *path = c.resolve_path(*path);
  if (!task_reads_pairs(t) && c.has("task.path")) fail("task.path", "is read only for kind = \"dataset\" or \"texts\"");
  for (const char* key : {"task.test_path", "task.vectors"})
    if (t.kind != "texts" && c.has(key)) fail(key, "is read only for kind = \"texts\"");
  const bool square = t.kind == "matching" || t.kind == "sorting";
  if (square && t.m != t.n) fail("task.m", "must equal task.n for " + t.kind + " (a permutation target)");
  if (t.min_n > t.n) fail("task.min_n", "must be in [1, task.n]");
  if (t.min_m > t.m) fail("task.min_m", "must be in [1, task.m]");
  if (square && t.min_m != t.min_n) fail("task.min_m", "must equal task.min_n for " + t.kind);
  if (t.kind == "sorting" && t.d != 1) fail("task.d", "must be 1 for sorting");
  if (t.kind == "whitened-ot" && t.min_n <= t.d)
    fail("task.min_n", "must exceed task.d for whitened-ot (a covariance of full rank)");
  if (t.kind == "whitened-ot" && t.min_m <= t.d)
    fail("task.min_m", "must exceed task.d for whitened-ot (a covariance of full rank)");
  if (t.random_weights && square)
    fail("task.random_weights", "is not available for " + t.kind + " (a permutation target needs uniform weights)");
  return t;
}

namespace {

// Refuses a model that cannot be held in this machine's memory, before anything is allocated:
// model.layers = 200000000 or model.mlp_ratio = 1048576 allocated gigabytes and then died with
// std::bad_alloc or "cannot create std::vector larger than max_size()".
void check_model_fits(const Config& c, const ModelConfig& m) {
  const ModelSize size = model_size(m);
  if (fits_in_memory(size.bytes)) return;
  // The error is located at the key that grew the model most (relative to its default).
  const ModelConfig defaults;
  const std::pair<const char*, long double> growth[] = {
      {"model.width", static_cast<long double>(m.width) / defaults.width},
      {"model.layers", static_cast<long double>(m.layers) / defaults.layers},
      {"model.mlp_ratio", static_cast<long double>(m.mlp_ratio) / defaults.mlp_ratio},
      {"model.k", static_cast<long double>(m.k) / defaults.k}};
  const char* key = growth[0].first;
  long double most = growth[0].second;
  for (const auto& [name, g] : growth)
    if (g > most) key = name, most = g;
  char count[32];
  std::snprintf(count, sizeof count, "%.3Lg", size.parameters);
  check_memory(size.bytes,
               std::string("the model (") + count + " parameters: model.width = " + std::to_string(m.width) +
                   ", model.layers = " + std::to_string(m.layers) + ", model.mlp_ratio = " +
                   std::to_string(m.mlp_ratio) + ", model.k = " + std::to_string(m.k) + ", d = " +
                   std::to_string(m.d) + ")",
               c.source_of(key), key);
}

// Refuses a training run whose arrays cannot be held at once, before any is allocated: the
// parameters (float64 in the state, dtype in the loop), AdamW's moments and the gradient groups,
// one pair's activations per thread (training in dtype, evaluation in float64), the batch's pairs
// and the generated held-out pairs (n d + m d + n m + n + m numbers each). A dataset's pairs are
// sized from its files (their reader checks them) and by each pair's workspace.
void check_training_fits(const Config& c, const TrainConfig& t) {
  const long double item = t.float32 ? 4 : 8;
  const long double P = model_size(t.model).parameters;
  const long double groups = std::min(t.train.batch, 8);
  const long double threads = std::max(1, omp_get_max_threads());
  const long double state = P * (3 * 8 + item * (3 + groups));
  if (task_reads_pairs(t.task)) {
    check_memory(state, "the training state (parameters, AdamW's moments and 8 gradient groups)", "", "model");
    return;
  }
  const long double n = t.task.n, m = t.task.m, d = t.task.d;
  const long double pair = n * d + m * d + n * m + n + m;
  // Each thread's evaluation also measures W_1 to the target by exact OT between the model's plan
  // (n m atoms) and the target's: n for a permutation (matching, sorting), at most n + m - 1 for
  // an exact-OT plan, n m for an entropic one.
  const long double target_atoms = t.task.kind == "entropic-ot"                          ? n * m
                                   : t.task.kind == "matching" || t.task.kind == "sorting" ? n
                                                                                          : n + m - 1;
  const long double work = threads * (static_cast<long double>(PairWorkspace<double>::numbers(t.model, t.task.n, t.task.m)) *
                                          (item + 8) +
                                      coupling_w1_bytes(n * m, target_atoms));
  const long double batch = t.train.batch * pair * item, tests = t.train.test_pairs * pair * 8;
  const long double total = state + work + batch + tests;
  const char* key = tests >= std::max({state, work, batch}) ? "train.test_pairs"
                    : batch >= std::max(state, work)         ? "train.batch"
                                                             : "task.n";
  check_memory(total,
               fmt::format("training pairs of {} and {} tokens ({} held-out pairs, batches of {}, the activations "
                           "and W_1 evaluation of {} thread{}, {:.3g} parameters with AdamW's moments)",
                           t.task.n, t.task.m, t.train.test_pairs, t.train.batch, static_cast<int>(threads),
                           threads == 1 ? "" : "s", P),
               c.source_of(key), key);
}

}  // namespace

ModelConfig read_model_config(const Config& c, int d) {
  ModelConfig m;
  m.d = d;
  read_keys(c, model_schema(), m);
  m.d = d;  // the tokens' dimension is the task's (read_train_config checks a stored model.d)
  if (m.width % m.heads != 0)
    throw InputError(c.source_of("model.heads"), "model.heads",
                     "must divide model.width (" + std::to_string(m.width) + " is not a multiple of " +
                         std::to_string(m.heads) + ")");
  check_model_fits(c, m);
  return m;
}

namespace {

// A dataset's d and test pair count come from its files (or from the pairs given in memory): a
// given task.d or train.test_pairs must agree with them.
void read_dataset_shape(const Config& c, TrainConfig& t, const std::optional<DatasetShape>& given) {
  TaskSpec& task = t.task;
  if (given && !task.path.empty())
    throw InputError(c.source_of("task.path"), "task.path", "the pairs are given in memory: leave task.path out");
  if (!given && task.path.empty())
    throw InputError(c.source_of("task.kind"), "task.path", "is required for kind = \"dataset\" (the folder of train/ and test/)");
  const std::string source = c.source_of("task.path");
  const int d = given ? given->d : dataset_dimension(task.path, source, "task.path");
  const long tests = given ? given->test_pairs
                           : static_cast<long>(dataset_part_size(task.path, "test", source, "task.path"));
  if (c.has("task.d") && task.d != d)
    throw InputError(c.source_of("task.d"), "task.d", fmt::format("is {}, the dataset's points have d = {}", task.d, d));
  if (c.has("train.test_pairs") && t.train.test_pairs != tests)
    throw InputError(c.source_of("train.test_pairs"), "train.test_pairs",
                     fmt::format("is {}, the dataset has {} test pairs (leave the key out)", t.train.test_pairs, tests));
  task.d = d;
  t.train.test_pairs = static_cast<int>(tests);
}

// Texts: d is the vectors', the test pairs are the lines of task.test_path (tokenflow/texts.hpp).
void read_texts_shape(const Config& c, TrainConfig& t) {
  TaskSpec& task = t.task;
  for (const auto& [value, key] : {std::pair{&task.path, "task.path"}, std::pair{&task.test_path, "task.test_path"},
                                   std::pair{&task.vectors, "task.vectors"}})
    if (value->empty()) throw InputError(c.source_of("task.kind"), key, "is required for kind = \"texts\"");
  const WordVectors vectors = read_word_vectors(task.vectors, "task.vectors");
  const long tests = static_cast<long>(read_text_pairs(task.test_path, vectors, "task.test_path").pairs.size());
  if (c.has("task.d") && task.d != vectors.dim)
    throw InputError(c.source_of("task.d"), "task.d", fmt::format("is {}, the word vectors have d = {}", task.d, vectors.dim));
  if (c.has("train.test_pairs") && t.train.test_pairs != tests)
    throw InputError(c.source_of("train.test_pairs"), "train.test_pairs",
                     fmt::format("is {}, task.test_path holds {} pairs (leave the key out)", t.train.test_pairs, tests));
  task.d = vectors.dim;
  t.train.test_pairs = static_cast<int>(tests);
}

}  // namespace

TrainConfig read_train_config(const Config& c, const std::optional<DatasetShape>& pairs) {
  c.check_keys(train_keys());
  TrainConfig t;
  read_field(c, dtype_key(), DtypeField{&t.float32});
  t.task = read_task_spec(c);
  if (pairs && t.task.kind != "dataset")
    throw InputError(c.source_of("task.kind"), "task.kind", "must be \"dataset\" when pairs are given");
  read_keys(c, train_spec_schema(), t.train);
  // Left out, the warm-up is a tenth of a short run (a 50-step check still trains) and 100 steps
  // of a long one (what keeps the coupling tasks stable: docs/sinkhorn-transformer.md).
  if (!c.has("train.warmup")) t.train.warmup = std::min(kDefaultWarmup, t.train.steps / 10);
  if (t.task.kind == "dataset") read_dataset_shape(c, t, pairs);
  if (t.task.kind == "texts") read_texts_shape(c, t);
  if (c.has("model.d") && c.get_int("model.d", 0) != t.task.d)
    throw InputError(c.source_of("model.d"), "model.d", "must equal task.d (" + std::to_string(t.task.d) + ")");
  t.model = read_model_config(c, t.task.d);
  check_training_fits(c, t);
  return t;
}

// ---- the TOML writer ----------------------------------------------------------------------------
namespace {

// with_all_keys = false leaves out the keys whose schema entry says they are not hashed.
std::string toml_text(const TrainConfig& t, bool with_all_keys) {
  bool float32 = t.float32;
  return field_toml(dtype_key(), DtypeField{&float32}) + "\n\n[task]\n" + write_keys(task_schema(), t.task, true) +
         "\n[model]\n" + write_keys(model_schema(), t.model, !with_all_keys) + "\n[train]\n" +
         write_keys(train_spec_schema(), t.train, !with_all_keys);
}

}  // namespace

std::string to_toml(const TrainConfig& config) {
  return toml_text(config, true);
}

std::string model_toml(const ModelConfig& model) {
  return "[model]\n" + write_keys(model_schema(), model, false);
}

std::uint64_t config_hash(const TrainConfig& config) {
  const std::string text = toml_text(config, false);
  return fnv1a64(text.data(), text.size());
}

}  // namespace tokenflow
