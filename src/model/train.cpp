// Training a Sinkhorn Transformer: configuration, the training loop, evaluation, checkpoints and
// the capacity sweep (tokenflow/train.hpp).
#include "tokenflow/train.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <numbers>
#include <sstream>

#include "binary.hpp"
#include "tokenflow/adamw.hpp"
#include "tokenflow/distributed.hpp"
#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/layers.hpp"

namespace tokenflow {

// ---- configuration ------------------------------------------------------------------------------
const std::vector<std::string>& train_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k{"dtype"};
    for (const auto& key : task_keys()) k.push_back(key);
    for (const auto& key : model_keys()) k.push_back(key);
    k.push_back("model.d");  // written by to_toml (model.bin); must equal task.d
    for (const char* key :
         {"train.steps", "train.batch", "train.lr", "train.seed", "train.test_pairs",
          "train.weight_decay", "train.beta1", "train.beta2", "train.warmup", "train.schedule",
          "train.grad_clip", "train.eval_every", "train.checkpoint_every"})
      k.emplace_back(key);
    return k;
  }();
  return keys;
}

TrainConfig read_train_config(const Config& c) {
  c.check_keys(train_keys());
  TrainConfig t;
  t.float32 = c.get_string("dtype", "f64", {"f64", "f32"}) == "f32";
  t.task = read_task_spec(c);
  if (c.has("model.d") && c.get_int("model.d", 0) != t.task.d)
    throw InputError(c.source_of("model.d"), "model.d",
                     "must equal task.d (" + std::to_string(t.task.d) + ")");
  t.model = read_model_config(c, t.task.d);
  TrainSpec& s = t.train;
  auto count = [&](const std::string& key, long fallback, long lo) {
    const auto v = c.get_int(key, fallback);
    if (v < lo)
      throw InputError(c.source_of(key), key,
                       "must be >= " + std::to_string(lo) + " (got " + std::to_string(v) + ")");
    return static_cast<long>(v);
  };
  auto number = [&](const std::string& key, double fallback, double lo, double hi, bool open_lo) {
    const double v = c.get_double(key, fallback);
    if (!std::isfinite(v) || v > hi || (open_lo ? !(v > lo) : !(v >= lo)))
      throw InputError(
          c.source_of(key), key,
          fmt::format("must be in {}{}, {}] (got {})", open_lo ? "(" : "[", lo, hi, v));
    return v;
  };
  s.steps = count("train.steps", s.steps, 0);
  s.batch = static_cast<int>(count("train.batch", s.batch, 1));
  s.lr = number("train.lr", s.lr, 0.0, 1e6, true);
  s.seed = static_cast<std::uint64_t>(count("train.seed", 0, 0));
  s.test_pairs = static_cast<int>(count("train.test_pairs", s.test_pairs, 1));
  s.weight_decay = number("train.weight_decay", s.weight_decay, 0.0, 1e6, false);
  s.beta1 = number("train.beta1", s.beta1, 0.0, 1.0, false);
  s.beta2 = number("train.beta2", s.beta2, 0.0, 1.0, false);
  if (s.beta1 >= 1.0) throw InputError(c.source_of("train.beta1"), "train.beta1", "must be < 1");
  if (s.beta2 >= 1.0) throw InputError(c.source_of("train.beta2"), "train.beta2", "must be < 1");
  s.warmup = count("train.warmup", s.warmup, 0);
  s.schedule = c.get_string("train.schedule", s.schedule, {"constant", "cosine"});
  s.grad_clip = number("train.grad_clip", s.grad_clip, 0.0, 1e300, false);
  s.eval_every = count("train.eval_every", s.eval_every, 0);
  s.checkpoint_every = count("train.checkpoint_every", s.checkpoint_every, 0);
  return t;
}

namespace {

// A TOML float (always with a '.' or an exponent, so it reads back as a float).
std::string toml_number(double v) {
  std::string s = fmt::format("{:.17g}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// with_all_keys = false leaves out what does not change the trajectory of the steps two runs have
// in common: eval_every, checkpoint_every, and steps itself unless the schedule depends on it.
std::string toml_text(const TrainConfig& t, bool with_all_keys) {
  std::ostringstream os;
  const TaskSpec& k = t.task;
  const ModelConfig& m = t.model;
  const TrainSpec& s = t.train;
  os << "dtype = \"" << (t.float32 ? "f32" : "f64") << "\"\n\n[task]\n"
     << "kind = \"" << k.kind << "\"\nn = " << k.n << "\nm = " << k.m << "\nmin_n = " << k.min_n
     << "\nmin_m = " << k.min_m << "\nd = " << k.d << "\nnoise = " << toml_number(k.noise)
     << "\nscale_range = [" << toml_number(k.scale_min) << ", " << toml_number(k.scale_max)
     << "]\nshift = " << toml_number(k.shift) << "\np = " << k.p
     << "\ntarget_epsilon = " << toml_number(k.target_epsilon)
     << "\nrandom_weights = " << (k.random_weights ? "true" : "false") << "\n\n[model]\n"
     << "d = " << m.d << "\nwidth = " << m.width << "\nlayers = " << m.layers
     << "\nheads = " << m.heads << "\nk = " << m.k << "\nmlp_ratio = " << m.mlp_ratio
     << "\nepsilon = " << toml_number(m.epsilon) << "\nsinkhorn_iters = " << m.sinkhorn_iters
     << "\nshare_encoders = " << (m.share_encoders ? "true" : "false") << "\n\n[train]\n"
     << (with_all_keys || s.schedule == "cosine" ? "steps = " + std::to_string(s.steps) + "\n"
                                                 : std::string())
     << "batch = " << s.batch << "\nlr = " << toml_number(s.lr) << "\nseed = " << s.seed
     << "\ntest_pairs = " << s.test_pairs << "\nweight_decay = " << toml_number(s.weight_decay)
     << "\nbeta1 = " << toml_number(s.beta1) << "\nbeta2 = " << toml_number(s.beta2)
     << "\nwarmup = " << s.warmup << "\nschedule = \"" << s.schedule
     << "\"\ngrad_clip = " << toml_number(s.grad_clip) << "\n";
  if (with_all_keys)
    os << "eval_every = " << s.eval_every << "\ncheckpoint_every = " << s.checkpoint_every << "\n";
  return os.str();
}

}  // namespace

std::string to_toml(const TrainConfig& config) {
  return toml_text(config, true);
}

std::uint64_t config_hash(const TrainConfig& config) {
  const std::string text = toml_text(config, false);
  return binary::fnv1a(text.data(), text.size());
}

// ---- evaluation
// -----------------------------------------------------------------------------------
namespace {

// Runs body(i) for i in [0, count) in parallel; the first exception is rethrown afterwards
// (exceptions must not leave an OpenMP region).
template <class Body>
void parallel_for(long count, const Body& body, bool dynamic = true) {
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&](long i) {
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  if (dynamic) {
#pragma omp parallel for schedule(dynamic, 1)
    for (long i = 0; i < count; ++i) guarded(i);
  } else {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < count; ++i) guarded(i);
  }
  if (error) std::rethrow_exception(error);
}

double kl(const RowMatrix& target, const RowMatrix& plan) {
  double s = 0.0;
  for (Eigen::Index i = 0; i < target.size(); ++i)
    if (target.data()[i] > 0.0) s += target.data()[i] * std::log(target.data()[i] / plan.data()[i]);
  return s;
}

Evaluation mean_of(const std::vector<Evaluation>& per_pair, bool has_assignment) {
  Evaluation e;
  for (const Evaluation& p : per_pair) {
    e.w1 += p.w1;
    e.loss += p.loss;
    e.accuracy += p.accuracy;
  }
  const double count = static_cast<double>(std::max<std::size_t>(1, per_pair.size()));
  e.w1 /= count;
  e.loss /= count;
  e.accuracy = has_assignment ? e.accuracy / count : std::nan("");
  return e;
}

}  // namespace

std::vector<CouplingPair> make_test_pairs(const TrainConfig& config) {
  std::vector<CouplingPair> pairs(static_cast<std::size_t>(config.train.test_pairs));
  parallel_for(static_cast<long>(pairs.size()), [&](long i) {
    pairs[static_cast<std::size_t>(i)] =
        make_pair(config.task, pair_seed(config.train.seed, 1, static_cast<std::uint64_t>(i)));
  });
  return pairs;
}

Evaluation evaluate(const ParameterLayout& layout, const std::vector<double>& params,
                    const std::vector<CouplingPair>& pairs, bool has_assignment) {
  std::vector<Evaluation> per_pair(pairs.size());
  std::vector<PairWorkspace<double>> workspaces(static_cast<std::size_t>(omp_get_max_threads()));
  const AlignedVector<double> theta(params.begin(),
                                    params.end());  // a fixed alignment: see model.hpp
  parallel_for(static_cast<long>(pairs.size()), [&](long i) {
    const CouplingPair& p = pairs[static_cast<std::size_t>(i)];
    const Eigen::VectorXd log_a = p.a.array().log(), log_b = p.b.array().log();
    PairInput<double> in;
    in.x = p.x.data();
    in.y = p.y.data();
    in.log_a = log_a.data();
    in.log_b = log_b.data();
    in.n = static_cast<int>(p.x.rows());
    in.m = static_cast<int>(p.y.rows());
    PairWorkspace<double>& ws = workspaces[static_cast<std::size_t>(omp_get_thread_num())];
    pair_forward(layout, theta.data(), in, ws);
    RowMatrix plan(in.n, in.m);
    for (Eigen::Index k = 0; k < plan.size(); ++k) plan.data()[k] = std::exp(ws.log_plan[k]);
    Evaluation& e = per_pair[static_cast<std::size_t>(i)];
    e.w1 = coupling_w1(p.x, p.y, plan, p.target);
    e.loss = nn::kl_forward(p.target.data(), ws.log_plan, in.n, in.m);
    e.accuracy = has_assignment ? assignment_accuracy(plan, p.assignment) : 0.0;
  });
  return mean_of(per_pair, has_assignment);
}

Evaluation evaluate_independent(const std::vector<CouplingPair>& pairs, bool has_assignment) {
  std::vector<Evaluation> per_pair(pairs.size());
  parallel_for(static_cast<long>(pairs.size()), [&](long i) {
    const CouplingPair& p = pairs[static_cast<std::size_t>(i)];
    const RowMatrix plan = p.a * p.b.transpose();
    Evaluation& e = per_pair[static_cast<std::size_t>(i)];
    e.w1 = coupling_w1(p.x, p.y, plan, p.target);
    e.loss = kl(p.target, plan);
    e.accuracy = has_assignment ? assignment_accuracy(plan, p.assignment) : 0.0;
  });
  return mean_of(per_pair, has_assignment);
}

TrainState initial_state(const TrainConfig& config, const std::vector<CouplingPair>& test_pairs) {
  const ParameterLayout layout(config.model);
  TrainState s;
  s.params = init_parameters(layout, config.train.seed);
  if (config.float32)  // the float32 run starts from the same values, rounded
    for (double& v : s.params) v = static_cast<float>(v);
  const bool assign = task_has_assignment(config.task);
  s.untrained = evaluate(layout, s.params, test_pairs, assign);
  s.independent = evaluate_independent(test_pairs, assign);
  MetricsRow row;
  row.loss = s.untrained.loss;
  row.test_w1 = s.untrained.w1;
  row.test_loss = s.untrained.loss;
  row.test_accuracy = s.untrained.accuracy;
  s.metrics.push_back(row);
  return s;
}

// ---- the training loop
// --------------------------------------------------------------------------------
namespace {

constexpr int kGroups = 8;  // fixed gradient groups: the sum does not depend on the thread count

double learning_rate(const TrainSpec& s, long step) {  // step counts from 0
  double lr = s.lr;
  if (s.warmup > 0 && step < s.warmup)
    lr *= static_cast<double>(step + 1) / static_cast<double>(s.warmup);
  if (s.schedule == "cosine" && s.steps > 1) {
    const double progress = static_cast<double>(step) / static_cast<double>(s.steps - 1);
    lr *= 0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return lr;
}

template <class T>
struct PairBuffers {
  AlignedVector<T> x, y, log_a, log_b, target;
  PairInput<T> input;
  void fill(const CouplingPair& p) {
    x.assign(p.x.data(), p.x.data() + p.x.size());
    y.assign(p.y.data(), p.y.data() + p.y.size());
    log_a.resize(static_cast<std::size_t>(p.a.size()));
    log_b.resize(static_cast<std::size_t>(p.b.size()));
    for (Eigen::Index i = 0; i < p.a.size(); ++i)
      log_a[static_cast<std::size_t>(i)] = static_cast<T>(std::log(p.a[i]));
    for (Eigen::Index j = 0; j < p.b.size(); ++j)
      log_b[static_cast<std::size_t>(j)] = static_cast<T>(std::log(p.b[j]));
    target.assign(p.target.data(), p.target.data() + p.target.size());
    input.x = x.data();
    input.y = y.data();
    input.log_a = log_a.data();
    input.log_b = log_b.data();
    input.target = target.data();
    input.n = static_cast<int>(p.x.rows());
    input.m = static_cast<int>(p.y.rows());
  }
};

template <class T>
TrainResult train_typed(const TrainConfig& config, TrainState st,
                        const std::vector<CouplingPair>& test_pairs, const TrainCallbacks& cb,
                        const Communicator* comm) {
  const auto start = std::chrono::steady_clock::now();
  const double seconds_before = st.seconds;
  auto elapsed = [&] {
    return seconds_before +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const ParameterLayout layout(config.model);
  const std::size_t P = layout.size();
  const TrainSpec& spec = config.train;
  if (st.params.size() != P) throw std::logic_error("train: state does not match the model");
  AlignedVector<T> params(st.params.begin(), st.params.end());
  std::vector<unsigned char> decays(P, 0);
  for (const ParameterTensor& t : layout.tensors())
    std::fill_n(decays.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, t.decays ? 1 : 0);
  AdamWOptions adam_options;
  adam_options.beta1 = spec.beta1;
  adam_options.beta2 = spec.beta2;
  adam_options.weight_decay = spec.weight_decay;
  AdamW<T> adam(decays, adam_options);
  if (!st.adam_m.empty()) {
    adam.m().assign(st.adam_m.begin(), st.adam_m.end());
    adam.v().assign(st.adam_v.begin(), st.adam_v.end());
  }
  adam.set_steps(st.step);

  const int B = spec.batch, groups = std::min(B, kGroups);
  std::vector<AlignedVector<T>> group_grads(static_cast<std::size_t>(groups), AlignedVector<T>(P));
  // Several ranks: rank r computes the groups [group_offsets[r], group_offsets[r + 1]) (their
  // pairs and gradients exactly as one process does), then every rank receives every group's
  // gradient and every pair's loss and sums them in the single-process order: bit for bit.
  const bool distributed = comm != nullptr && comm->size() > 1;
  const std::vector<Eigen::Index> group_offsets = block_offsets(groups, distributed ? comm->size() : 1);
  const int rank = distributed ? comm->rank() : 0;
  const long my_first = static_cast<long>(group_offsets[static_cast<std::size_t>(rank)]);
  const long my_groups = static_cast<long>(group_offsets[static_cast<std::size_t>(rank) + 1]) - my_first;
  std::vector<Eigen::Index> pair_offsets(group_offsets.size());
  for (std::size_t r = 0; r < group_offsets.size(); ++r) pair_offsets[r] = group_offsets[r] * B / groups;
  std::vector<T> gathered_grads(distributed ? static_cast<std::size_t>(groups) * P : 0);
  std::vector<PairWorkspace<T>> workspaces(static_cast<std::size_t>(omp_get_max_threads()));
  std::vector<PairBuffers<T>> buffers(static_cast<std::size_t>(B));
  std::vector<double> pair_loss(static_cast<std::size_t>(B));
  const long eval_every = spec.eval_every > 0 ? spec.eval_every : std::max(1L, spec.steps / 20);
  const bool assign = task_has_assignment(config.task);
  double pairs_per_second = 0.0;
  auto to_double = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  auto save_state = [&] {
    st.params = to_double(params);
    st.adam_m = to_double(adam.m());
    st.adam_v = to_double(adam.v());
    st.seconds = elapsed();
  };
  auto add_metrics_row = [&](const Evaluation& e) {
    MetricsRow row;
    row.step = st.step;
    row.loss = st.loss_count > 0 ? st.loss_sum / static_cast<double>(st.loss_count) : e.loss;
    row.test_w1 = e.w1;
    row.seconds = elapsed();
    row.test_loss = e.loss;
    row.test_accuracy = e.accuracy;
    st.metrics.push_back(row);
    st.loss_sum = 0.0;
    st.loss_count = 0;
    if (cb.metrics) cb.metrics(row);
  };

  while (st.step < spec.steps) {
    const auto step_start = std::chrono::steady_clock::now();
    const long s = st.step;
    parallel_for(my_groups, [&](long own) {
      const long g = my_first + own;
      AlignedVector<T>& grad = group_grads[static_cast<std::size_t>(g)];
      std::fill(grad.begin(), grad.end(), T(0));
      PairWorkspace<T>& ws = workspaces[static_cast<std::size_t>(omp_get_thread_num())];
      for (long b = g * B / groups; b < (g + 1) * B / groups; ++b) {
        PairBuffers<T>& buf = buffers[static_cast<std::size_t>(b)];
        buf.fill(make_pair(config.task,
                           pair_seed(spec.seed, 0,
                                     static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(B) +
                                         static_cast<std::uint64_t>(b))));
        pair_loss[static_cast<std::size_t>(b)] =
            static_cast<double>(pair_forward(layout, params.data(), buf.input, ws));
        pair_backward(layout, params.data(), grad.data(), buf.input, ws, T(1) / static_cast<T>(B));
      }
    });
    if (distributed) {
      for (long g = my_first; g < my_first + my_groups; ++g)
        std::copy(group_grads[static_cast<std::size_t>(g)].begin(), group_grads[static_cast<std::size_t>(g)].end(),
                  gathered_grads.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(g) * P));
      allgather_rows(comm, gathered_grads.data(), group_offsets, static_cast<Eigen::Index>(P));
      for (int g = 0; g < groups; ++g)
        if (g < my_first || g >= my_first + my_groups)
          std::copy_n(gathered_grads.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(g) * P), P,
                      group_grads[static_cast<std::size_t>(g)].begin());
      allgather_rows(comm, pair_loss.data(), pair_offsets, 1);
    }
    // The groups summed in a fixed order (each entry by one thread).
    AlignedVector<T>& grad = group_grads[0];
    parallel_for(
        static_cast<long>(P + 4095) / 4096,
        [&](long chunk) {
          const std::size_t lo = static_cast<std::size_t>(chunk) * 4096,
                            hi = std::min(P, lo + 4096);
          for (int g = 1; g < groups; ++g) {
            const AlignedVector<T>& other = group_grads[static_cast<std::size_t>(g)];
            for (std::size_t i = lo; i < hi; ++i) grad[i] += other[i];
          }
        },
        false);
    double loss = 0.0;
    for (double l : pair_loss) loss += l;
    loss /= B;
    if (!std::isfinite(loss))
      throw std::runtime_error(
          fmt::format("train: the loss is not finite at step {} (lower train.lr?)", s));
    if (spec.grad_clip > 0.0) {
      double norm2 = 0.0;
      for (T v : grad) norm2 += static_cast<double>(v) * static_cast<double>(v);
      const double norm = std::sqrt(norm2);
      if (norm > spec.grad_clip) {
        const T scale = static_cast<T>(spec.grad_clip / norm);
        for (T& v : grad) v *= scale;
      }
    }
    adam.step(params.data(), grad.data(), learning_rate(spec, s));
    ++st.step;
    st.loss_sum += loss;
    ++st.loss_count;
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    const double rate = dt > 0.0 ? B / dt : 0.0;
    pairs_per_second = pairs_per_second == 0.0 ? rate : 0.9 * pairs_per_second + 0.1 * rate;
    // A progress callback that returns false stops the run after this step's bookkeeping, with a
    // checkpoint of exactly the state the next step would start from (when checkpoints are on).
    const bool stop = cb.progress && !cb.progress(st.step, spec.steps, loss, pairs_per_second);
    if (st.step % eval_every == 0 || st.step == spec.steps)
      add_metrics_row(evaluate(layout, to_double(params), test_pairs, assign));
    if (spec.checkpoint_every > 0 && (st.step % spec.checkpoint_every == 0 || stop) && cb.checkpoint) {
      save_state();
      cb.checkpoint(st);
    }
    if (stop) throw Cancelled();
  }
  save_state();
  TrainResult r;
  if (!st.metrics.empty() && st.metrics.back().step == st.step) {
    r.final.w1 = st.metrics.back().test_w1;
    r.final.loss = st.metrics.back().test_loss;
    r.final.accuracy = st.metrics.back().test_accuracy;
  } else {
    r.final = evaluate(layout, st.params, test_pairs, assign);
  }
  r.model.config = config.model;
  r.model.params = st.params;
  r.model.config_toml = to_toml(config);
  r.state = std::move(st);
  return r;
}

}  // namespace

TrainResult train(const TrainConfig& config, TrainState state,
                  const std::vector<CouplingPair>& test_pairs, const TrainCallbacks& callbacks,
                  const Communicator* comm) {
  return config.float32 ? train_typed<float>(config, std::move(state), test_pairs, callbacks, comm)
                        : train_typed<double>(config, std::move(state), test_pairs, callbacks, comm);
}

// ---- checkpoints
// ---------------------------------------------------------------------------------------
namespace {
constexpr char kCheckpointMagic[8] = {'T', 'F', 'C', 'K', 'P', 'T', '0', '1'};

void write_evaluation(binary::Writer& w, const Evaluation& e) {
  w.f64(e.w1);
  w.f64(e.loss);
  w.f64(e.accuracy);
}

Evaluation read_evaluation(binary::Reader& r) {
  Evaluation e;
  e.w1 = r.f64("an evaluation");
  e.loss = r.f64("an evaluation");
  e.accuracy = r.f64("an evaluation");
  return e;
}
}  // namespace

void write_checkpoint(const std::filesystem::path& path, const TrainConfig& config,
                      const TrainState& s) {
  binary::Writer w;
  w.bytes(kCheckpointMagic, 8);
  w.str(to_toml(config));
  w.u64(config_hash(config));
  w.i64(s.step);
  w.f64_array(s.params.data(), s.params.size());
  w.f64_array(s.adam_m.data(), s.adam_m.size());
  w.f64_array(s.adam_v.data(), s.adam_v.size());
  w.u64(s.metrics.size());
  for (const MetricsRow& m : s.metrics) {
    w.i64(m.step);
    for (double v : {m.loss, m.test_w1, m.seconds, m.test_loss, m.test_accuracy}) w.f64(v);
  }
  write_evaluation(w, s.untrained);
  write_evaluation(w, s.independent);
  w.f64(s.seconds);
  w.f64(s.loss_sum);
  w.i64(s.loss_count);
  replace_file_atomically(path, w.seal());
}

std::string read_checkpoint_config(const std::filesystem::path& path) {
  binary::Reader r(binary::read_file(path, "checkpoint"), path.string(), kCheckpointMagic);
  return r.str("the configuration");
}

TrainState read_checkpoint(const std::filesystem::path& path, const TrainConfig& config) {
  binary::Reader r(binary::read_file(path, "checkpoint"), path.string(), kCheckpointMagic);
  r.str("the configuration");
  const std::uint64_t hash = r.u64("the configuration hash");
  if (hash != config_hash(config))
    r.fail(fmt::format(
        "belongs to another configuration (hash {:016x}, this run {:016x}); use the run's "
        "config, or a new --out",
        hash, config_hash(config)));
  // The seal is a checksum anyone can recompute: every field is checked like user input, and
  // every count against the bytes the file holds before anything is allocated.
  auto bad = [&](const std::string& field, const std::string& what) {
    r.fail("is not a valid checkpoint: " + field + " " + what + "; delete it to start the run afresh");
  };
  const ModelSize size = model_size(config.model);
  if (3 * 8 * size.parameters > static_cast<long double>(r.remaining()))
    r.fail("is truncated: its configuration's model needs more parameters than the file holds");
  TrainState s;
  s.step = r.i64("the step");
  if (s.step < 0) bad("the step", "is negative");
  s.params = r.f64_array("the parameters");
  s.adam_m = r.f64_array("the first moments");
  s.adam_v = r.f64_array("the second moments");
  const std::uint64_t rows = r.u64("the metrics count");
  if (rows > r.remaining() / 48) r.fail("bad metrics count");
  s.metrics.reserve(static_cast<std::size_t>(rows));
  for (std::uint64_t i = 0; i < rows; ++i) {
    MetricsRow m;
    m.step = r.i64("a metrics row");
    m.loss = r.f64("a metrics row");
    m.test_w1 = r.f64("a metrics row");
    m.seconds = r.f64("a metrics row");
    m.test_loss = r.f64("a metrics row");
    m.test_accuracy = r.f64("a metrics row");
    if (m.step < 0 || m.step > s.step || (!s.metrics.empty() && m.step < s.metrics.back().step))
      bad("a metrics row", "has a step out of order (" + std::to_string(m.step) + ")");
    s.metrics.push_back(m);
  }
  s.untrained = read_evaluation(r);
  s.independent = read_evaluation(r);
  s.seconds = r.f64("the seconds");
  s.loss_sum = r.f64("the loss sum");
  s.loss_count = r.i64("the loss count");
  r.finish();
  const std::size_t P = ParameterLayout(config.model).size();
  if (s.params.size() != P || s.adam_m.size() != P || s.adam_v.size() != P)
    r.fail("its state does not match its configuration");
  if (s.step > config.train.steps)
    r.fail(fmt::format("is at step {}, beyond train.steps = {}", s.step, config.train.steps));
  for (std::size_t i = 0; i < P; ++i) {
    if (!std::isfinite(s.params[i])) bad("the parameters", "are not finite");
    if (!std::isfinite(s.adam_m[i])) bad("the first moments", "are not finite");
    if (!std::isfinite(s.adam_v[i]) || s.adam_v[i] < 0.0) bad("the second moments", "must be finite and >= 0");
  }
  if (!std::isfinite(s.seconds) || s.seconds < 0.0) bad("the seconds", "must be finite and >= 0");
  if (!std::isfinite(s.loss_sum)) bad("the loss sum", "is not finite");
  if (s.loss_count < 0 || s.loss_count > s.step) bad("the loss count", "is out of range");
  return s;
}

// ---- capacity sweep
// ----------------------------------------------------------------------------------
std::vector<SweepPoint> capacity_sweep(const TrainConfig& base,
                                       const std::vector<std::pair<int, int>>& grid,
                                       const TrainCallbacks& callbacks,
                                       const std::function<void(const SweepPoint&)>& on_point) {
  const std::vector<CouplingPair> test_pairs = make_test_pairs(base);
  std::vector<SweepPoint> points;
  for (const auto& [width, layers] : grid) {
    TrainConfig c = base;
    c.model.width = width;
    c.model.layers = layers;
    c.model.k = std::max(1, width / 2);
    if (width % c.model.heads != 0) c.model.heads = 1;
    const auto start = std::chrono::steady_clock::now();
    TrainResult r = train(c, initial_state(c, test_pairs), test_pairs, callbacks);
    SweepPoint p;
    p.width = width;
    p.layers = layers;
    p.parameters = ParameterLayout(c.model).size();
    p.trained = r.final;
    p.untrained = r.state.untrained;
    p.independent = r.state.independent;
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    points.push_back(p);
    if (on_point) on_point(p);
  }
  return points;
}

}  // namespace tokenflow
