// Training a Sinkhorn Transformer: the fresh state and the training loop (tokenflow/train.hpp).
// Evaluation: evaluate.cpp; checkpoint.bin: train_checkpoint.cpp; the capacity sweep:
// capacity_sweep.cpp; the keys: src/io/train_config.cpp.
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

#include "parallel_for.hpp"
#include "tokenflow/adamw.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/distributed.hpp"
#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/layers.hpp"

namespace tokenflow {

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

}  // namespace tokenflow
