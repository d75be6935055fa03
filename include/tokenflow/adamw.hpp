// tokenflow/adamw.hpp: the AdamW optimizer (Loshchilov & Hutter 2019, Algorithm 2), as PyTorch's
// torch.optim.AdamW computes it, over a flat parameter array.
//
// At step t = 1, 2, ... with gradient g and learning rate lr:
//   p <- p (1 - lr wd)                       (decoupled weight decay; only where decays[i])
//   m <- beta1 m + (1 - beta1) g,   v <- beta2 v + (1 - beta2) g^2
//   p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The moments are kept in the working precision T; they are part of a training checkpoint.
#pragma once

#include <cstddef>
#include <vector>

namespace tokenflow {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
};

template <class T>
class AdamW {
 public:
  // decays (size of the parameter array): whether weight decay applies to each parameter.
  AdamW(std::vector<unsigned char> decays, AdamWOptions options);
  // One step on params (size()) with grads; lr may change from step to step (a schedule).
  void step(T* params, const T* grads, double lr);
  std::size_t size() const { return decays_.size(); }
  long steps() const { return t_; }
  // The state, for checkpoints: step count and the two moments.
  std::vector<T>& m() { return m_; }
  std::vector<T>& v() { return v_; }
  const std::vector<T>& m() const { return m_; }
  const std::vector<T>& v() const { return v_; }
  void set_steps(long t) { t_ = t; }

 private:
  std::vector<unsigned char> decays_;
  AdamWOptions options_;
  std::vector<T> m_, v_;
  long t_ = 0;
};

}  // namespace tokenflow
