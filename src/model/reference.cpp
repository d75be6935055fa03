// The reference layers: plain double loops in float64, each formula written out as in
// tokenflow/layers.hpp. Slow and obviously correct; the optimized layers are tested against them.
#include <cmath>
#include <limits>
#include <vector>

#include "tokenflow/layers.hpp"

namespace tokenflow::nn::reference {

void linear_forward(double* out, const double* inp, const double* weight, const double* bias, int n,
                    int C, int OC) {
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < OC; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; ++c) s += inp[i * C + c] * weight[o * C + c];
      out[i * OC + o] = s;
    }
}

void linear_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                     const double* inp, const double* weight, int n, int C, int OC) {
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < OC; ++o) {
      const double d = dout[i * OC + o];
      if (dbias) dbias[o] += d;
      for (int c = 0; c < C; ++c) {
        if (dinp) dinp[i * C + c] += d * weight[o * C + c];
        if (dweight) dweight[o * C + c] += d * inp[i * C + c];
      }
    }
}

void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, int n, int C) {
  for (int i = 0; i < n; ++i) {
    const double* x = inp + i * C;
    double mu = 0.0;
    for (int c = 0; c < C; ++c) mu += x[c];
    mu /= C;
    double var = 0.0;
    for (int c = 0; c < C; ++c) var += (x[c] - mu) * (x[c] - mu);
    var /= C;
    const double r = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) out[i * C + c] = (x[c] - mu) * r * weight[c] + bias[c];
    mean[i] = mu;
    rstd[i] = r;
  }
}

void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, const double* mean,
                        const double* rstd, int n, int C) {
  for (int i = 0; i < n; ++i) {
    // xhat_c = (x_c - mean) rstd;  y_c = xhat_c w_c + b_c
    // dx_c = rstd (g_c - mean_c'(g) - xhat_c mean_c'(g xhat)),  g_c = dy_c w_c
    double mean_g = 0.0, mean_gx = 0.0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[i * C + c] - mean[i]) * rstd[i];
      const double g = dout[i * C + c] * weight[c];
      mean_g += g;
      mean_gx += g * xhat;
      if (dweight) dweight[c] += dout[i * C + c] * xhat;
      if (dbias) dbias[c] += dout[i * C + c];
    }
    mean_g /= C;
    mean_gx /= C;
    if (!dinp) continue;
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[i * C + c] - mean[i]) * rstd[i];
      dinp[i * C + c] += rstd[i] * (dout[i * C + c] * weight[c] - mean_g - xhat * mean_gx);
    }
  }
}

void attention_forward(double* out, double* att, const double* qkv, const double* log_a, int n,
                       int C, int H) {
  const int hs = C / H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> s(static_cast<std::size_t>(n));
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < n; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < n; ++j) {
        double dot = 0.0;
        for (int c = 0; c < hs; ++c)
          dot += qkv[i * 3 * C + h * hs + c] * qkv[j * 3 * C + C + h * hs + c];
        s[j] = dot * scale + log_a[j];
        mx = std::max(mx, s[j]);
      }
      double total = 0.0;
      for (int j = 0; j < n; ++j) total += std::exp(s[j] - mx);
      for (int j = 0; j < n; ++j) att[(h * n + i) * n + j] = std::exp(s[j] - mx) / total;
      for (int c = 0; c < hs; ++c) {
        double y = 0.0;
        for (int j = 0; j < n; ++j)
          y += att[(h * n + i) * n + j] * qkv[j * 3 * C + 2 * C + h * hs + c];
        out[i * C + h * hs + c] = y;
      }
    }
}

void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                        int n, int C, int H) {
  const int hs = C / H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> datt(static_cast<std::size_t>(n));
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < n; ++i) {
      const double* A = att + (h * n + i) * n;
      // "out_ic = sum_j A_ij v_jc": dA_ij = sum_c dout_ic v_jc, dv_jc += A_ij dout_ic
      for (int j = 0; j < n; ++j) {
        double d = 0.0;
        for (int c = 0; c < hs; ++c) {
          d += dout[i * C + h * hs + c] * qkv[j * 3 * C + 2 * C + h * hs + c];
          dqkv[j * 3 * C + 2 * C + h * hs + c] += A[j] * dout[i * C + h * hs + c];
        }
        datt[j] = d;
      }
      // "A_i = softmax(s_i)": ds_ij = A_ij (dA_ij - sum_j' A_ij' dA_ij')
      double dot = 0.0;
      for (int j = 0; j < n; ++j) dot += A[j] * datt[j];
      for (int j = 0; j < n; ++j) {
        const double ds = A[j] * (datt[j] - dot) * scale;
        // "s_ij = <q_i, k_j> scale + log a_j"
        for (int c = 0; c < hs; ++c) {
          dqkv[i * 3 * C + h * hs + c] += ds * qkv[j * 3 * C + C + h * hs + c];
          dqkv[j * 3 * C + C + h * hs + c] += ds * qkv[i * 3 * C + h * hs + c];
        }
      }
    }
}

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
}

void gelu_forward(double* out, const double* inp, int N) {
  for (int i = 0; i < N; ++i) {
    const double x = inp[i];
    out[i] = 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + 0.044715 * x * x * x)));
  }
}

void gelu_backward(double* dinp, const double* inp, const double* dout, int N) {
  for (int i = 0; i < N; ++i) {
    const double x = inp[i];
    const double t = std::tanh(kGeluScale * (x + 0.044715 * x * x * x));
    const double dt = (1.0 - t * t) * kGeluScale * (1.0 + 3.0 * 0.044715 * x * x);
    dinp[i] += dout[i] * (0.5 * (1.0 + t) + 0.5 * x * dt);
  }
}

void cost_forward(double* cost, const double* Q, const double* K, int n, int m, int k) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(k));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      double dot = 0.0;
      for (int c = 0; c < k; ++c) dot += Q[i * k + c] * K[j * k + c];
      cost[i * m + j] = -dot * scale;
    }
}

void cost_backward(double* dQ, double* dK, const double* dcost, const double* Q, const double* K,
                   int n, int m, int k) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(k));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      for (int c = 0; c < k; ++c) {
        if (dQ) dQ[i * k + c] -= dcost[i * m + j] * K[j * k + c] * scale;
        if (dK) dK[j * k + c] -= dcost[i * m + j] * Q[i * k + c] * scale;
      }
}

namespace {

// -log sum_j exp(z_j), with the maximum taken out.
double neg_logsumexp(const std::vector<double>& z) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double v : z) mx = std::max(mx, v);
  double s = 0.0;
  for (double v : z) s += std::exp(v - mx);
  return -(mx + std::log(s));
}

}  // namespace

void sinkhorn_forward(double* log_plan, double* u_history, double* v_history, const double* cost,
                      const double* log_a, const double* log_b, double epsilon, int iters, int n,
                      int m, double tau) {
  auto S = [&](int i, int j) { return -cost[i * m + j] / epsilon; };
  std::vector<double> u(static_cast<std::size_t>(n), 0.0), v(static_cast<std::size_t>(m), 0.0);
  std::vector<double> zr(static_cast<std::size_t>(m)), zc(static_cast<std::size_t>(n));
  for (int t = 0; t < iters; ++t) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < m; ++j) zr[j] = log_b[j] + v[j] + S(i, j);
      u[i] = tau * neg_logsumexp(zr);
    }
    for (int j = 0; j < m; ++j) {
      for (int i = 0; i < n; ++i) zc[i] = log_a[i] + u[i] + S(i, j);
      v[j] = tau * neg_logsumexp(zc);
    }
    for (int i = 0; i < n; ++i) u_history[t * n + i] = u[i];
    for (int j = 0; j < m; ++j) v_history[t * m + j] = v[j];
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) log_plan[i * m + j] = log_a[i] + log_b[j] + u[i] + v[j] + S(i, j);
}

void sinkhorn_backward(double* dcost, const double* dlog_plan, const double* u_history,
                       const double* v_history, const double* cost, const double* log_a,
                       const double* log_b, double epsilon, int iters, int n, int m, double tau) {
  auto S = [&](int i, int j) { return -cost[i * m + j] / epsilon; };
  // "log_plan_ij = log a_i + log b_j + u^T_i + v^T_j + S_ij"
  std::vector<double> dS(static_cast<std::size_t>(n * m)), du(static_cast<std::size_t>(n), 0.0),
      dv(static_cast<std::size_t>(m), 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      dS[i * m + j] = dlog_plan[i * m + j];
      du[i] += dlog_plan[i * m + j];
      dv[j] += dlog_plan[i * m + j];
    }
  for (int t = iters - 1; t >= 0; --t) {
    const double* u = u_history + t * n;
    const double* v = v_history + t * m;
    // "v^t_j = -tau log sum_i exp(log a_i + u^t_i + S_ij)": d v_j / d z_ij = -tau softmax_i(z)_ij,
    // softmax_i(z)_ij = exp(z_ij + v_j / tau)
    for (int j = 0; j < m; ++j)
      for (int i = 0; i < n; ++i) {
        const double w = tau * std::exp(log_a[i] + u[i] + v[j] / tau + S(i, j));
        dS[i * m + j] -= dv[j] * w;
        du[i] -= dv[j] * w;
      }
    // "u^t_i = -tau log sum_j exp(log b_j + v^{t-1}_j + S_ij)"
    std::vector<double> dv_prev(static_cast<std::size_t>(m), 0.0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) {
        const double v_prev = t > 0 ? v_history[(t - 1) * m + j] : 0.0;
        const double w = tau * std::exp(log_b[j] + v_prev + u[i] / tau + S(i, j));
        dS[i * m + j] -= du[i] * w;
        dv_prev[j] -= du[i] * w;
      }
    dv = dv_prev;
    std::fill(du.begin(), du.end(), 0.0);
  }
  // "S_ij = -C_ij / eps"
  for (int i = 0; i < n * m; ++i) dcost[i] -= dS[i] / epsilon;
}

double kl_forward(const double* target, const double* log_plan, int n, int m, bool mass) {
  double loss = 0.0;
  for (int i = 0; i < n * m; ++i)
    if (target[i] > 0.0) loss += target[i] * (std::log(target[i]) - log_plan[i]);
  if (mass)  // the generalized KL's mass terms: sum pi - sum pi*
    for (int i = 0; i < n * m; ++i) loss += std::exp(log_plan[i]) - target[i];
  return loss;
}

}  // namespace tokenflow::nn::reference
