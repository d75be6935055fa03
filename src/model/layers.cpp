// The optimized layers: Eigen maps over the caller's arrays (GEMMs, vectorized exp/tanh), the
// same formulas as src/model/reference.cpp. Instantiated for float and double at the end.
// Every backward pass quotes the forward line it inverts.
#include "tokenflow/layers.hpp"

#include <Eigen/Core>
#include <cmath>

namespace tokenflow::nn {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Map = Eigen::Map<RowMat<T>>;
template <class T>
using CMap = Eigen::Map<const RowMat<T>>;
template <class T>
using StridedMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using CStridedMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using CRowVecMap = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>;

}  // namespace

// ---- linear ---------------------------------------------------------------------------------
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int n, int C, int OC) {
  Map<T> y(out, n, OC);
  // y (n, OC) = x (n, C) W^T (C, OC) + b
  y.noalias() = CMap<T>(inp, n, C) * CMap<T>(weight, OC, C).transpose();
  if (bias) y.rowwise() += CRowVecMap<T>(bias, OC);
}

template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int n, int C, int OC) {
  // "y = x W^T + b":  dx += dy W,  dW += dy^T x,  db += colsum(dy)
  const CMap<T> dy(dout, n, OC);
  if (dinp) Map<T>(dinp, n, C).noalias() += dy * CMap<T>(weight, OC, C);
  if (dweight) Map<T>(dweight, OC, C).noalias() += dy.transpose() * CMap<T>(inp, n, C);
  if (dbias) Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(dbias, OC) += dy.colwise().sum();
}

// ---- LayerNorm ----------------------------------------------------------------------------------
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int n, int C) {
  const CRowVecMap<T> w(weight, C), b(bias, C);
  for (int i = 0; i < n; ++i) {
    const CRowVecMap<T> x(inp + static_cast<std::ptrdiff_t>(i) * C, C);
    const T mu = x.mean();
    const T var = (x.array() - mu).square().mean();
    const T r = T(1) / std::sqrt(var + T(1e-5));
    Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(out + static_cast<std::ptrdiff_t>(i) * C, C) =
        ((x.array() - mu) * r * w.array() + b.array()).matrix();
    mean[i] = mu;
    rstd[i] = r;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int n, int C) {
  for (int i = 0; i < n; ++i) {
    const T* x = inp + static_cast<std::ptrdiff_t>(i) * C;
    const T* dy = dout + static_cast<std::ptrdiff_t>(i) * C;
    const T mu = mean[i], r = rstd[i];
    // "out = xhat w + b",  xhat = (x - mean) rstd,  g = dy w
    T mean_g = 0, mean_gx = 0;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - mu) * r, g = dy[c] * weight[c];
      mean_g += g;
      mean_gx += g * xhat;
      if (dweight) dweight[c] += dy[c] * xhat;
      if (dbias) dbias[c] += dy[c];
    }
    mean_g /= static_cast<T>(C);
    mean_gx /= static_cast<T>(C);
    if (!dinp) continue;
    // "xhat = (x - mean(x)) / sqrt(var(x) + eps)": dx = rstd (g - mean(g) - xhat mean(g xhat))
    T* dx = dinp + static_cast<std::ptrdiff_t>(i) * C;
    for (int c = 0; c < C; ++c)
      dx[c] += r * (dy[c] * weight[c] - mean_g - (x[c] - mu) * r * mean_gx);
  }
}

// ---- attention --------------------------------------------------------------------------------
template <class T>
void attention_forward(T* out, T* att, const T* qkv, const T* log_a, int n, int C, int H) {
  const int hs = C / H;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  const CRowVecMap<T> la(log_a, n);
  for (int h = 0; h < H; ++h) {
    const CStridedMap<T> q(qkv + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    const CStridedMap<T> k(qkv + C + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    const CStridedMap<T> v(qkv + 2 * C + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    Map<T> A(att + static_cast<std::ptrdiff_t>(h) * n * n, n, n);
    // s (n, n) = q k^T scale + log a_j;  A = row softmax(s)
    A.noalias() = q * k.transpose();
    A *= scale;
    A.rowwise() += la;
    for (int i = 0; i < n; ++i) {
      auto row = A.row(i).array();
      row = (row - row.maxCoeff()).exp();
      row /= row.sum();
    }
    // y_h (n, hs) = A v
    StridedMap<T>(out + h * hs, n, hs, Eigen::OuterStride<>(C)).noalias() = A * v;
  }
}

template <class T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int n,
                        int C, int H) {
  const int hs = C / H;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int h = 0; h < H; ++h) {
    const CStridedMap<T> q(qkv + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    const CStridedMap<T> k(qkv + C + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    const CStridedMap<T> v(qkv + 2 * C + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    StridedMap<T> dq(dqkv + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    StridedMap<T> dk(dqkv + C + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    StridedMap<T> dv(dqkv + 2 * C + h * hs, n, hs, Eigen::OuterStride<>(3 * C));
    const CMap<T> A(att + static_cast<std::ptrdiff_t>(h) * n * n, n, n);
    const CStridedMap<T> dy(dout + h * hs, n, hs, Eigen::OuterStride<>(C));
    Map<T> dA(scratch, n, n);
    // "y = A v":  dA = dy v^T,  dv += A^T dy
    dA.noalias() = dy * v.transpose();
    dv.noalias() += A.transpose() * dy;
    // "A = softmax(s)":  ds = A (dA - rowsum(A dA)), then the scale of "s = q k^T scale + log a"
    for (int i = 0; i < n; ++i) {
      const T dot = (A.row(i).array() * dA.row(i).array()).sum();
      dA.row(i).array() = A.row(i).array() * (dA.row(i).array() - dot) * scale;
    }
    // "s = q k^T":  dq += ds k,  dk += ds^T q
    dq.noalias() += dA * k;
    dk.noalias() += dA.transpose() * q;
  }
}

// ---- GELU ---------------------------------------------------------------------------------------
// 0.5 (1 + tanh(z)) = sigma(2 z) = 1 / (1 + exp(-2 z)): one vectorized exp instead of a scalar
// tanh (libm's tanh is not vectorized); the absolute error is a few ulps of 1, as for tanh.
template <class T>
void gelu_forward(T* out, const T* inp, int N) {
  const T c = T(0.7978845608028654);  // sqrt(2 / pi)
  const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> x(inp, N);
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(out, N) =
      x / (T(1) + (T(-2) * c * (x + T(0.044715) * x.cube())).exp());
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int N) {
  const T c = T(0.7978845608028654);
  const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> x(inp, N), dy(dout, N);
  // "out = x sigma(2 z), z = c (x + 0.044715 x^3)":
  //   d out / dx = s + 2 x s (1 - s) z',  s = sigma(2 z),  z' = c (1 + 3 0.044715 x^2)
  // s in a per-thread buffer that only grows: no allocation once the largest N has been seen.
  thread_local Eigen::Array<T, Eigen::Dynamic, 1> s_buffer;
  if (s_buffer.size() < N) s_buffer.resize(N);
  auto s = s_buffer.head(N);
  s = T(1) / (T(1) + (T(-2) * c * (x + T(0.044715) * x.cube())).exp());
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(dinp, N) +=
      dy * (s + T(2) * c * x * s * (T(1) - s) * (T(1) + T(3 * 0.044715) * x.square()));
}

// ---- cost
// -----------------------------------------------------------------------------------------
template <class T>
void cost_forward(T* cost, const T* Q, const T* K, int n, int m, int k) {
  const T scale = T(1) / std::sqrt(static_cast<T>(k));
  // C (n, m) = -Q K^T / sqrt(k)
  Map<T>(cost, n, m).noalias() = (-scale) * (CMap<T>(Q, n, k) * CMap<T>(K, m, k).transpose());
}

template <class T>
void cost_backward(T* dQ, T* dK, const T* dcost, const T* Q, const T* K, int n, int m, int k) {
  const T scale = T(1) / std::sqrt(static_cast<T>(k));
  const CMap<T> dC(dcost, n, m);
  // "C = -Q K^T / sqrt(k)":  dQ -= dC K / sqrt(k),  dK -= dC^T Q / sqrt(k)
  if (dQ) Map<T>(dQ, n, k).noalias() -= scale * (dC * CMap<T>(K, m, k));
  if (dK) Map<T>(dK, m, k).noalias() -= scale * (dC.transpose() * CMap<T>(Q, n, k));
}

// ---- Sinkhorn layer
// ----------------------------------------------------------------------------------
template <class T>
void sinkhorn_forward(T* log_plan, T* row_weights, T* col_weights, T* u_out, T* v_out,
                      const T* cost, const T* log_a, const T* log_b, T epsilon, int iters, int n,
                      int m, T tau, T* potential_history) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ArrMap = Eigen::Map<Arr>;
  const Eigen::Map<const Arr> C(cost, n, m);
  const Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>> lb(log_b, m);
  const Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> la(log_a, n);
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> u(u_out, n);
  Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> v(v_out, m);
  const T inv_eps = T(1) / epsilon;
  // Per-thread scratch that only grows: no allocation once the largest m has been seen.
  thread_local Eigen::Array<T, 1, Eigen::Dynamic> column_scratch;
  if (column_scratch.size() < m) column_scratch.resize(m);
  v.setZero();
  for (int t = 0; t < iters; ++t) {
    ArrMap R(row_weights + static_cast<std::ptrdiff_t>(t) * n * m, n, m);
    ArrMap P(col_weights + static_cast<std::ptrdiff_t>(t) * n * m, n, m);
    // u_i = -log sum_j exp(z_ij),  z_ij = log b_j + v_j + S_ij;  R = row softmax(z)
    R = (-inv_eps) * C;
    R.rowwise() += lb;  // (one broadcast at a time: a sum of two rows would be a temporary)
    R.rowwise() += v;
    for (int i = 0; i < n; ++i) {
      const T mx = R.row(i).maxCoeff();
      R.row(i) = (R.row(i) - mx).exp();
      const T s = R.row(i).sum();
      R.row(i) /= s;
      u[i] = -tau * (mx + std::log(s));
    }
    // v_j = -log sum_i exp(w_ij),  w_ij = log a_i + u_i + S_ij;  P = column softmax(w)
    P = (-inv_eps) * C;
    P.colwise() += la;
    P.colwise() += u;
    auto mx = column_scratch.head(m);
    mx = P.colwise().maxCoeff();
    P.rowwise() -= mx;
    P = P.exp();
    v = P.colwise().sum();  // the column sums, then the potential
    P.rowwise() /= v;
    v = -tau * (mx + v.log());
    if (potential_history) {
      T* h = potential_history + static_cast<std::ptrdiff_t>(t) * (n + m);
      std::copy_n(u.data(), n, h);
      std::copy_n(v.data(), m, h + n);
    }
  }
  // log_plan = log a_i + log b_j + u_i + v_j + S_ij
  ArrMap L(log_plan, n, m);
  L = (-inv_eps) * C;
  L.colwise() += la;
  L.colwise() += u;
  L.rowwise() += lb;
  L.rowwise() += v;
}

template <class T>
void sinkhorn_backward(T* dcost, T* scratch, const T* dlog_plan, const T* row_weights,
                       const T* col_weights, T epsilon, int iters, int n, int m, T tau, T* dtau,
                       const T* potential_history) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const Arr> G(dlog_plan, n, m);
  // dS accumulates directly into dcost, scaled at the end: dcost += -dS / eps.
  Eigen::Map<Arr> dC(dcost, n, m);
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> du(scratch, n);
  Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> dv(scratch + n, m);
  Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> dv_prev(scratch + n + m, m);
  const T minus_inv_eps = T(-1) / epsilon;
  // "log_plan = log a + log b + u^T + v^T + S"
  dC += minus_inv_eps * G;
  du = G.rowwise().sum();
  dv = G.colwise().sum();
  // d loss / d tau, summed in double: "u^t = tau (-lse)" gives du^t . u^t / tau (likewise v^t).
  double dtau_sum = 0.0;
  for (int t = iters - 1; t >= 0; --t) {
    const Eigen::Map<const Arr> R(row_weights + static_cast<std::ptrdiff_t>(t) * n * m, n, m);
    const Eigen::Map<const Arr> P(col_weights + static_cast<std::ptrdiff_t>(t) * n * m, n, m);
    const T* history = potential_history ? potential_history + static_cast<std::ptrdiff_t>(t) * (n + m) : nullptr;
    if (dtau)
      for (int j = 0; j < m; ++j) dtau_sum += static_cast<double>(dv[j]) * history[n + j];
    // "v^t_j = -log sum_i exp(log a_i + u^t_i + S_ij)":  dS -= dv_j P_ij,  du_i -= sum_j dv_j P_ij
    // "u^t_i = -log sum_j exp(log b_j + v^{t-1}_j + S_ij)": dS -= du_i R_ij, dv_prev_j = -sum_i
    // du_i R_ij Both contributions to dS in one pass: dS_ij -= dv_j P_ij + du'_i R_ij (du' includes
    // the first).
    // Unbalanced: "v^t = -tau log sum", "u^t = -tau log sum": the gradients reaching the sums are
    // tau dv and tau du (tau = 1 leaves every product as it was).
    dv *= tau;
    du -= (P.rowwise() * dv).rowwise().sum();
    if (dtau)
      for (int i = 0; i < n; ++i) dtau_sum += static_cast<double>(du[i]) * history[i];
    du *= tau;
    dC -= minus_inv_eps * ((P.rowwise() * dv) + (R.colwise() * du));
    dv_prev = -(R.colwise() * du).colwise().sum();
    dv = dv_prev;
    du.setZero();
  }
  if (dtau) *dtau += static_cast<T>(dtau_sum / static_cast<double>(tau));
}

// ---- KL loss ------------------------------------------------------------------------------------
template <class T>
T kl_forward(const T* target, const T* log_plan, int n, int m, bool mass) {
  T loss = 0;
  for (int i = 0; i < n * m; ++i) {
    if (target[i] > T(0)) loss += target[i] * (std::log(target[i]) - log_plan[i]);
    if (mass) loss += std::exp(log_plan[i]) - target[i];
  }
  return loss;
}

template <class T>
void kl_backward(T* dlog_plan, const T* target, T scale, int n, int m, const T* log_plan) {
  // "loss = sum target (log target - log_plan) [+ sum (exp(log_plan) - target)]"
  for (int i = 0; i < n * m; ++i) dlog_plan[i] -= scale * target[i];
  if (log_plan)
    for (int i = 0; i < n * m; ++i) dlog_plan[i] += scale * std::exp(log_plan[i]);
}

#define TOKENFLOW_INSTANTIATE_LAYERS(T)                                                            \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);                \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);       \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);          \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,          \
                                      const T*, int, int);                                         \
  template void attention_forward<T>(T*, T*, const T*, const T*, int, int, int);                   \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int);        \
  template void gelu_forward<T>(T*, const T*, int);                                                \
  template void gelu_backward<T>(T*, const T*, const T*, int);                                     \
  template void cost_forward<T>(T*, const T*, const T*, int, int, int);                            \
  template void cost_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int);             \
  template void sinkhorn_forward<T>(T*, T*, T*, T*, T*, const T*, const T*, const T*, T, int, int, \
                                    int, T, T*);                                                   \
  template void sinkhorn_backward<T>(T*, T*, const T*, const T*, const T*, T, int, int, int, T, T*, \
                                     const T*);                                                    \
  template T kl_forward<T>(const T*, const T*, int, int, bool);                                    \
  template void kl_backward<T>(T*, const T*, T, int, int, const T*);

TOKENFLOW_INSTANTIATE_LAYERS(float)
TOKENFLOW_INSTANTIATE_LAYERS(double)

}  // namespace tokenflow::nn
