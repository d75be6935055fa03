// AdamW (tokenflow/adamw.hpp).
#include "tokenflow/adamw.hpp"

#include <cmath>

namespace tokenflow {

template <class T>
AdamW<T>::AdamW(std::vector<unsigned char> decays, AdamWOptions options)
    : decays_(std::move(decays)),
      options_(options),
      m_(decays_.size(), T(0)),
      v_(decays_.size(), T(0)) {}

template <class T>
void AdamW<T>::step(T* params, const T* grads, double lr) {
  ++t_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(b1, static_cast<double>(t_))));
  const T bias2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t_))));
  const T decay = static_cast<T>(1.0 - lr * options_.weight_decay);
  const T eps = static_cast<T>(options_.eps), tb1 = static_cast<T>(b1), tb2 = static_cast<T>(b2);
  const std::size_t size = decays_.size();
  for (std::size_t i = 0; i < size; ++i) {
    const T g = grads[i];
    if (decays_[i]) params[i] *= decay;
    m_[i] = tb1 * m_[i] + (T(1) - tb1) * g;
    v_[i] = tb2 * v_[i] + (T(1) - tb2) * g * g;
    params[i] -= step_size * m_[i] / (std::sqrt(v_[i]) / bias2_sqrt + eps);
  }
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace tokenflow
