// Training a Sinkhorn Transformer: the fresh state and the training loop (tokenflow/train.hpp).
// Evaluation: evaluate.cpp; the capacity sweep:
// capacity_sweep.cpp; the keys, checkpoint.bin and model.bin: src/config/ (train_config.cpp,
// train_checkpoint.cpp, model_file.cpp).
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

#include "../kernel/parallel_for.hpp"
#include "tokenflow/adamw.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/coupling_source.hpp"
#include "tokenflow/distributed.hpp"
#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/layers.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

TrainState initial_state(const TrainConfig& config, const std::vector<CouplingPair>& test_pairs,
                         const std::function<bool()>& keep_going) {
  const ParameterLayout layout(config.model);
  TrainState s;
  s.params = init_parameters(layout, config.train.seed);
  if (config.float32)  // the float32 run starts from the same values, rounded
    for (double& v : s.params) v = static_cast<float>(v);
  const bool assign = reports_accuracy(config.task, test_pairs);
  s.untrained = evaluate(layout, s.params, test_pairs, assign, false, keep_going);
  s.independent = evaluate_independent(test_pairs, assign);
  MetricsRow row;
  row.loss = s.untrained.loss;
  row.test_w1 = s.untrained.w1;
  row.test_loss = s.untrained.loss;
  row.test_accuracy = s.untrained.accuracy;
  row.test_alignment = s.untrained.alignment;
  s.metrics.push_back(row);
  s.best_step = 0;
  s.best = s.untrained;
  s.best_params = s.params;
  return s;
}

bool test_loss_far_above_best(double test_loss, double best_test_loss, double untrained_test_loss) {
  if (std::isnan(test_loss)) return true;
  return test_loss > kTestLossRiseFactor * best_test_loss &&
         test_loss - best_test_loss > kTestLossRiseShare * untrained_test_loss;
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
    // In float32 a coordinate beyond its range becomes infinite (the data readers refuse such data
    // before the run; this guards every other source of pairs).
    auto finite = [](const AlignedVector<T>& v) { return std::all_of(v.begin(), v.end(), [](T e) { return std::isfinite(e); }); };
    if (!finite(x) || !finite(y))
      throw InputError("", "dtype", "the pairs' coordinates do not fit float32 (|x| above 3.4e38): use dtype = \"f64\"");
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

// The optimizer, its decay mask from the layout, and its moments and step count from the state.
template <class T>
AdamW<T> make_adam(const ParameterLayout& layout, const TrainSpec& spec, const TrainState& st) {
  std::vector<unsigned char> decays(layout.size(), 0);
  for (const ParameterTensor& t : layout.tensors())
    std::fill_n(decays.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, t.decays ? 1 : 0);
  AdamWOptions options;
  options.beta1 = spec.beta1;
  options.beta2 = spec.beta2;
  options.weight_decay = spec.weight_decay;
  AdamW<T> adam(decays, options);
  if (!st.adam_m.empty()) {
    adam.m().assign(st.adam_m.begin(), st.adam_m.end());
    adam.v().assign(st.adam_v.begin(), st.adam_v.end());
  }
  adam.set_steps(st.step);
  return adam;
}

// The loss and gradient of one step's batch. The B pairs are split into a fixed number of groups
// (kGroups, or B when smaller); each group's gradient is summed by one thread, then the groups are
// added in group order, so the result depends neither on the thread count nor on the number of
// MPI ranks. Several ranks: rank r computes the groups [group_offsets[r], group_offsets[r + 1])
// (their pairs and gradients exactly as one process does), then every rank receives every group's
// gradient and every pair's loss and sums them in the single-process order: bit for bit.
template <class T>
class BatchGradient {
 public:
  BatchGradient(const TrainConfig& config, const ParameterLayout& layout, const Communicator* comm,
                const CouplingSource* source)
      : config_(config),
        source_(source != nullptr && source->size() > 0 ? source : nullptr),
        layout_(layout),
        comm_(comm != nullptr && comm->size() > 1 ? comm : nullptr),
        P_(layout.size()),
        B_(config.train.batch),
        groups_(std::min(B_, kGroups)),
        group_offsets_(block_offsets(groups_, comm_ ? comm_->size() : 1)),
        group_grads_(static_cast<std::size_t>(groups_), AlignedVector<T>(P_)),
        gathered_grads_(comm_ ? static_cast<std::size_t>(groups_) * P_ : 0),
        workspaces_(static_cast<std::size_t>(omp_get_max_threads())),
        buffers_(static_cast<std::size_t>(B_)),
        pair_loss_(static_cast<std::size_t>(B_)) {
    const auto rank = static_cast<std::size_t>(comm_ ? comm_->rank() : 0);
    my_first_ = static_cast<long>(group_offsets_[rank]);
    my_groups_ = static_cast<long>(group_offsets_[rank + 1]) - my_first_;
    pair_offsets_.resize(group_offsets_.size());
    for (std::size_t r = 0; r < group_offsets_.size(); ++r) pair_offsets_[r] = group_offsets_[r] * B_ / groups_;
  }

  // The mean loss of step `step`'s batch at `params`; its gradient is then gradient(). On one
  // process keep_going is polled between pairs: Cancelled when it returns false (nothing of the
  // step is kept; under MPI a rank alone must not leave the collective step, so it is not polled).
  double compute(const AlignedVector<T>& params, long step, const std::function<bool()>& keep_going) {
    if (source_) read_batch(step);
    StopPoll poll(comm_ ? std::function<bool()>() : keep_going);
    own_groups(params, step, poll);
    if (poll.stopped()) throw Cancelled();
    if (comm_) gather();
    sum_groups();
    double loss = 0.0;
    for (double l : pair_loss_) loss += l;
    return loss / B_;
  }
  AlignedVector<T>& gradient() { return group_grads_[0]; }

 private:
  // Pair b of step `step`'s batch is drawn by this seed: the batch depends only on the step, never
  // on threads, ranks or a resume.
  std::uint64_t pair_seed_of(long step, long b) const {
    return pair_seed(config_.train.seed, 0,
                     static_cast<std::uint64_t>(step) * static_cast<std::uint64_t>(B_) + static_cast<std::uint64_t>(b));
  }

  // This rank's pairs of step `step`'s batch, each drawn uniformly (with replacement) from the
  // source by its seed and read now, on this thread (a source reads files, one caller at a time).
  void read_batch(long step) {
    const long first = my_first_ * B_ / groups_, last = (my_first_ + my_groups_) * B_ / groups_;
    for (long b = first; b < last; ++b)
      buffers_[static_cast<std::size_t>(b)].fill(
          source_->pair(static_cast<std::size_t>(pair_seed_of(step, b) % static_cast<std::uint64_t>(source_->size()))));
  }

  void own_groups(const AlignedVector<T>& params, long step, StopPoll& poll) {
    parallel_for(my_groups_, [&](long own) {
      const long g = my_first_ + own;
      AlignedVector<T>& grad = group_grads_[static_cast<std::size_t>(g)];
      std::fill(grad.begin(), grad.end(), T(0));
      PairWorkspace<T>& ws = workspaces_[static_cast<std::size_t>(omp_get_thread_num())];
      for (long b = g * B_ / groups_; b < (g + 1) * B_ / groups_; ++b) {
        if (poll.stopped()) return;
        PairBuffers<T>& buf = buffers_[static_cast<std::size_t>(b)];
        if (!source_) buf.fill(make_pair(config_.task, pair_seed_of(step, b)));  // else read_batch filled it
        pair_loss_[static_cast<std::size_t>(b)] =
            static_cast<double>(pair_forward(layout_, params.data(), buf.input, ws));
        pair_backward(layout_, params.data(), grad.data(), buf.input, ws, T(1) / static_cast<T>(B_));
      }
    });
  }

  // Every rank receives every group's gradient and every pair's loss.
  void gather() {
    for (long g = my_first_; g < my_first_ + my_groups_; ++g)
      std::copy(group_grads_[static_cast<std::size_t>(g)].begin(), group_grads_[static_cast<std::size_t>(g)].end(),
                gathered_grads_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(g) * P_));
    allgather_rows(comm_, gathered_grads_.data(), group_offsets_, static_cast<Eigen::Index>(P_));
    for (int g = 0; g < groups_; ++g)
      if (g < my_first_ || g >= my_first_ + my_groups_)
        std::copy_n(gathered_grads_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(g) * P_), P_,
                    group_grads_[static_cast<std::size_t>(g)].begin());
    allgather_rows(comm_, pair_loss_.data(), pair_offsets_, 1);
  }

  // The groups summed into group 0 in a fixed order (each entry by one thread).
  void sum_groups() {
    AlignedVector<T>& grad = group_grads_[0];
    parallel_for(
        static_cast<long>(P_ + 4095) / 4096,
        [&](long chunk) {
          const std::size_t lo = static_cast<std::size_t>(chunk) * 4096, hi = std::min(P_, lo + 4096);
          for (int g = 1; g < groups_; ++g) {
            const AlignedVector<T>& other = group_grads_[static_cast<std::size_t>(g)];
            for (std::size_t i = lo; i < hi; ++i) grad[i] += other[i];
          }
        },
        false);
  }

  const TrainConfig& config_;
  const CouplingSource* source_;  // a dataset's training pairs; null: generated pairs
  const ParameterLayout& layout_;
  const Communicator* comm_;  // null on one process
  std::size_t P_;
  int B_, groups_;
  std::vector<Eigen::Index> group_offsets_, pair_offsets_;
  long my_first_ = 0, my_groups_ = 0;
  std::vector<AlignedVector<T>> group_grads_;
  std::vector<T> gathered_grads_;
  std::vector<PairWorkspace<T>> workspaces_;
  std::vector<PairBuffers<T>> buffers_;
  std::vector<double> pair_loss_;
};

// The gradient's Euclidean norm (NaN or inf when an entry is not finite).
template <class T>
double gradient_norm(const AlignedVector<T>& grad) {
  double norm2 = 0.0;
  for (T v : grad) norm2 += static_cast<double>(v) * static_cast<double>(v);
  return std::sqrt(norm2);
}

// Scales the gradient of Euclidean norm `norm` to max_norm when it is longer (max_norm <= 0: no
// clipping).
template <class T>
void clip_gradient(AlignedVector<T>& grad, double norm, double max_norm) {
  if (max_norm > 0.0 && norm > max_norm) {
    const T scale = static_cast<T>(max_norm / norm);
    for (T& v : grad) v *= scale;
  }
}

// After an evaluation at st.step: keeps the best (lowest test loss) parameters, and warns once when
// the test loss rises far above its best (test_loss_far_above_best), again after it came back.
void track_best(TrainState& st, const Evaluation& e, const std::vector<double>& params, const TrainSpec& spec,
                const TrainCallbacks& cb) {
  if (e.loss < st.best.loss || (std::isnan(st.best.loss) && !std::isnan(e.loss))) {
    st.best_step = st.step;
    st.best = e;
    st.best_params = params;
  }
  const bool far = test_loss_far_above_best(e.loss, st.best.loss, st.untrained.loss);
  if (far && !st.far_above) {
    st.warnings.push_back(fmt::format(
        "train: at step {} the test loss is {:.4g}, far above its best {:.4g} at step {} (the model kept in "
        "best_model.bin); {}",
        st.step, e.loss, st.best.loss, st.best_step,
        spec.warmup > 0 && spec.grad_clip > 0.0 ? "lower train.lr or train.grad_clip"
                                                 : "lower train.lr, or set train.warmup and train.grad_clip (their defaults)"));
    if (cb.warning) cb.warning(st.warnings.back());
  }
  st.far_above = far;
}

// A failure's warning, as it happens: in the state (summary, checkpoints) and to the callback.
void warn(TrainState& st, const TrainCallbacks& cb, const std::string& failure) {
  st.warnings.push_back("train: " + failure);
  if (cb.warning) cb.warning(st.warnings.back());
}

// One step's loss and gradient norm, or why the step cannot be taken (a NumericalFailure of the
// forward pass, a non-finite loss or gradient): then the update is not applied. A stop request
// (keep_going) throws Cancelled.
template <class T>
std::string compute_step(BatchGradient<T>& batch, const AlignedVector<T>& params, long s, double& loss,
                         double& norm, const std::function<bool()>& keep_going, bool float32) {
  try {
    loss = batch.compute(params, s, keep_going);
    norm = gradient_norm(batch.gradient());
  } catch (const NumericalFailure& e) {  // the arithmetic could not carry the forward pass
    return fmt::format("the training step {} failed: {}; the update was not applied", s + 1, e.what());
  }
  if (std::isfinite(loss) && std::isfinite(norm)) return {};
  return fmt::format("the training {} is not finite at step {} ({}); the update was not applied{}",
                     std::isfinite(loss) ? "gradient" : "loss", s + 1,
                     std::isfinite(loss) ? fmt::format("norm {}", norm) : fmt::format("loss {}", loss),
                     float32 ? " (float32 may overflow on these data: dtype = \"f64\")" : "");
}

// The result of a run that stopped (finished, or failed for `failure`) in state st. The final
// evaluation adds the converged plan's metrics (train.hpp); its w1, loss and accuracy are those of
// the last metrics row when there is one for this step (the same computation). A failed run's
// parameters may not evaluate at all (the forward pass that gave the non-finite loss can give
// non-finite plans): its final metrics are then NaN, and the best model stands. A stop request
// during that evaluation throws Cancelled and leaves st as it was.
TrainResult finish_run(const TrainConfig& config, const ParameterLayout& layout, TrainState& st,
                       const std::vector<CouplingPair>& test_pairs, bool assign, const std::string& failure,
                       const std::function<bool()>& keep_going) {
  TrainResult r;
  if (!failure.empty()) {
    r.status = "failed";
    r.reason = failure;
  }
  try {
    r.final = evaluate(layout, st.params, test_pairs, assign, true, keep_going);
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception&) {
    if (failure.empty()) throw;
    const double nan = std::nan("");
    r.final.w1 = r.final.loss = r.final.accuracy = nan;
  }
  r.model.config = config.model;
  r.model.params = st.params;
  r.best_model.config = config.model;
  r.best_model.params = st.best_params.empty() ? st.params : st.best_params;
  r.state = std::move(st);
  return r;
}

// The metrics row of evaluation e at st.step (with the mean training loss since the last row),
// the best model tracked (its parameters `at`), the callback told.
void add_metrics_row(TrainState& st, const Evaluation& e, const std::vector<double>& at, double seconds,
                     const TrainSpec& spec, const TrainCallbacks& cb) {
  MetricsRow row;
  row.step = st.step;
  row.loss = st.loss_count > 0 ? st.loss_sum / static_cast<double>(st.loss_count) : e.loss;
  row.test_w1 = e.w1;
  row.seconds = seconds;
  row.test_loss = e.loss;
  row.test_accuracy = e.accuracy;
  row.test_alignment = e.alignment;
  st.metrics.push_back(row);
  st.loss_sum = 0.0;
  st.loss_count = 0;
  track_best(st, e, at, spec, cb);
  if (cb.metrics) cb.metrics(row);
}

// Pairs per second, smoothed over steps: `pairs` done since step_start, after `previous` (0: none).
double smoothed_rate(double previous, double pairs, std::chrono::steady_clock::time_point step_start) {
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  const double rate = dt > 0.0 ? pairs / dt : 0.0;
  return previous == 0.0 ? rate : 0.9 * previous + 0.1 * rate;
}

// After each step: the learned relaxation lambda = eps / rho stays >= 0 (0: the balanced layer;
// model.hpp, model.learn_marginal_penalty).
template <class T>
void keep_feasible(const ParameterLayout& layout, AlignedVector<T>& params) {
  if (layout.config().learn_marginal_penalty)
    params[layout.relaxation()] = std::max(params[layout.relaxation()], T(0));
}

template <class T>
TrainResult train_typed(const TrainConfig& config, TrainState st,
                        const std::vector<CouplingPair>& test_pairs, const TrainCallbacks& cb,
                        const Communicator* comm, const CouplingSource* train_pairs) {
  const auto start = std::chrono::steady_clock::now();
  const double seconds_before = st.seconds;
  auto elapsed = [&] {
    return seconds_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const ParameterLayout layout(config.model);
  const TrainSpec& spec = config.train;
  if (st.params.size() != layout.size()) throw std::logic_error("train: state does not match the model");
  AlignedVector<T> params(st.params.begin(), st.params.end());
  AdamW<T> adam = make_adam<T>(layout, spec, st);
  if (task_reads_pairs(config.task) && (train_pairs == nullptr || train_pairs->size() == 0))
    throw InputError("", "pairs", "a " + config.task.kind + " task trains on given pairs, and none were given");
  BatchGradient<T> batch(config, layout, comm, train_pairs);
  const long eval_every = spec.eval_every > 0 ? spec.eval_every : std::max(1L, spec.steps / 20);
  const bool assign = reports_accuracy(config.task, test_pairs);
  double pairs_per_second = 0.0;
  auto to_double = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  auto save_state = [&] {
    st.params = to_double(params);
    st.adam_m = to_double(adam.m());
    st.adam_v = to_double(adam.v());
    st.seconds = elapsed();
  };
  std::string failure;  // a non-finite training loss or gradient: the run stops, status "failed"

  // On one process a stop request (keep_going) cuts a step or an evaluation short: the state is
  // that before the step (or after it, its evaluation pending), saved when checkpoints are on.
  const std::function<bool()> keep_going =
      comm != nullptr && comm->size() > 1 ? std::function<bool()>() : cb.keep_going;
  auto checkpoint = [&] {
    if (spec.checkpoint_every <= 0 || !cb.checkpoint) return;
    save_state();
    cb.checkpoint(st);
  };
  auto stop_here = [&] {
    checkpoint();
    throw Cancelled();
  };
  auto evaluation_due = [&] { return st.step % eval_every == 0 || st.step == spec.steps; };
  // The evaluation at st.step (its metrics row, the best model): an evaluation the arithmetic
  // cannot carry ends the run as failed; false when a stop request cut it short.
  auto evaluate_step = [&] {
    const std::vector<double> now = to_double(params);
    try {
      add_metrics_row(st, evaluate(layout, now, test_pairs, assign, false, keep_going), now, elapsed(), spec, cb);
    } catch (const NumericalFailure& e) {
      failure = fmt::format("the test evaluation at step {} failed: {}", st.step, e.what());
      warn(st, cb, failure);
    } catch (const Cancelled&) {
      return false;
    }
    return true;
  };
  // A run stopped during an evaluation resumes with it (the metrics are those of a run never
  // stopped).
  if (st.step > 0 && evaluation_due() && (st.metrics.empty() || st.metrics.back().step != st.step))
    if (!evaluate_step()) stop_here();
  while (failure.empty() && st.step < spec.steps) {
    const auto step_start = std::chrono::steady_clock::now();
    const long s = st.step;
    double loss = 0.0, norm = 0.0;
    try {
      failure = compute_step(batch, params, s, loss, norm, keep_going, config.float32);
    } catch (const Cancelled&) {
      stop_here();
    }
    if (!failure.empty()) {
      warn(st, cb, failure);
      break;
    }
    clip_gradient(batch.gradient(), norm, spec.grad_clip);
    adam.step(params.data(), batch.gradient().data(), learning_rate(spec, s));
    keep_feasible(layout, params);
    ++st.step;
    st.loss_sum += loss;
    ++st.loss_count;
    pairs_per_second = smoothed_rate(pairs_per_second, spec.batch, step_start);
    // A progress callback that returns false stops the run after this step's bookkeeping, with a
    // checkpoint of exactly the state the next step would start from (when checkpoints are on).
    // A stop skips this step's evaluation, which the resumed run does first.
    bool stop = cb.progress && !cb.progress(st.step, spec.steps, loss, pairs_per_second);
    if (!stop && evaluation_due()) {
      stop = !evaluate_step();
      if (!failure.empty()) break;
    }
    if (stop) stop_here();
    if (spec.checkpoint_every > 0 && st.step % spec.checkpoint_every == 0) checkpoint();
  }
  save_state();
  try {
    return finish_run(config, layout, st, test_pairs, assign, failure, keep_going);
  } catch (const Cancelled&) {
    stop_here();  // the final evaluation cut short: a checkpoint of this state, then Cancelled
    throw;
  }
}

}  // namespace

TrainResult train(const TrainConfig& config, TrainState state,
                  const std::vector<CouplingPair>& test_pairs, const TrainCallbacks& callbacks,
                  const Communicator* comm, const CouplingSource* train_pairs) {
  return config.float32 ? train_typed<float>(config, std::move(state), test_pairs, callbacks, comm, train_pairs)
                        : train_typed<double>(config, std::move(state), test_pairs, callbacks, comm, train_pairs);
}

}  // namespace tokenflow
