// The Sinkhorn Transformer's layers (tokenflow/layers.hpp): every optimized forward and backward
// pass against the plain reference (float64 and float32), and every backward pass against finite
// differences through the gradient checker (tokenflow/gradient_check.hpp), on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "test_util.hpp"
#include "tokenflow/gradient_check.hpp"
#include "tokenflow/layers.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {
namespace {

using testing::kUnit32;
using testing::kUnit64;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
using Tensors = std::vector<std::vector<T>>;

// A layer as a function of its differentiable inputs (parameters included): forward writes the
// output; backward accumulates the input gradients for a given output gradient (it runs the
// forward itself to get what the layer saves).
template <class T>
struct Impl {
  std::function<void(const Tensors<T>& in, std::vector<T>& out)> forward;
  std::function<void(const Tensors<T>& in, const std::vector<T>& dout, Tensors<T>& din)> backward;
};

struct LayerCase {
  std::string name;
  std::vector<std::size_t> sizes;  // of the differentiable inputs
  std::size_t out_size = 0;
  // Number of roundings on the longest path from the inputs to one output (forward) and to one
  // input gradient (backward), for unit-size inputs: the error bound of each side is
  // path * u * magnitude (Higham's gamma_n, n u / (1 - n u) ~ n u).
  double forward_path = 0, backward_path = 0;
  // Fixed, non-differentiable data the lambdas capture (log weights, targets) is drawn by make().
  std::function<void(std::mt19937_64&)> make;
  Impl<double> reference, opt64;
  Impl<float> opt32;
};

void PrintTo(const LayerCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<double> random_vector(std::mt19937_64& rng, std::size_t size, double sd = 1.0) {
  std::normal_distribution<double> normal(0.0, sd);
  std::vector<double> v(size);
  for (auto& x : v) x = normal(rng);
  return v;
}

template <class T>
Tensors<T> cast(const Tensors<double>& in) {
  Tensors<T> out;
  for (const auto& t : in) out.emplace_back(t.begin(), t.end());
  return out;
}

using testing::max_abs;

// The shared data of the cases (captured by reference in the lambdas).
struct Shared {
  std::vector<double> log_a, log_b, target;
  std::vector<float> log_a32, log_b32, target32;
};
Shared shared;

void draw_log_weights(std::mt19937_64& rng, int n, int m) {
  std::uniform_real_distribution<double> uni(0.5, 1.5);
  auto draw = [&](int count) {
    std::vector<double> w(static_cast<std::size_t>(count));
    double s = 0.0;
    for (auto& x : w) s += (x = uni(rng));
    for (auto& x : w) x = std::log(static_cast<double>(static_cast<float>(x / s)));
    return w;
  };
  shared.log_a = draw(n);
  shared.log_b = draw(m);
  shared.log_a32.assign(shared.log_a.begin(), shared.log_a.end());
  shared.log_b32.assign(shared.log_b.begin(), shared.log_b.end());
}

std::vector<LayerCase> all_layer_cases() {
  std::vector<LayerCase> cases;
  {
    static constexpr int n = 5, C = 7, OC = 6;
    LayerCase c;
    c.name = "linear";
    c.sizes = {n * C, OC * C, OC};
    c.out_size = n * OC;
    c.forward_path = C + 1;
    c.backward_path = std::max(n, OC) + 1;
    c.reference.forward = [](const auto& in, auto& out) {
      nn::reference::linear_forward(out.data(), in[0].data(), in[1].data(), in[2].data(), n, C, OC);
    };
    c.reference.backward = [](const auto& in, const auto& dout, auto& din) {
      nn::reference::linear_backward(din[0].data(), din[1].data(), din[2].data(), dout.data(),
                                     in[0].data(), in[1].data(), n, C, OC);
    };
    auto opt = [](auto& impl) {
      impl.forward = [](const auto& in, auto& out) {
        nn::linear_forward(out.data(), in[0].data(), in[1].data(), in[2].data(), n, C, OC);
      };
      impl.backward = [](const auto& in, const auto& dout, auto& din) {
        nn::linear_backward(din[0].data(), din[1].data(), din[2].data(), dout.data(), in[0].data(),
                            in[1].data(), n, C, OC);
      };
    };
    opt(c.opt64);
    opt(c.opt32);
    cases.push_back(c);
  }
  {
    static constexpr int n = 4, C = 9;
    LayerCase c;
    c.name = "layernorm";
    c.sizes = {n * C, C, C};
    c.out_size = n * C;
    // mean (C), variance (C), rsqrt, normalize: ~2C + 6; the backward's two means add 2C.
    c.forward_path = 2 * C + 6;
    c.backward_path = 4 * C + 10;
    auto make = [](auto& impl, auto fwd, auto bwd) {
      impl.forward = [fwd](const auto& in, auto& out) {
        using T = typename std::decay_t<decltype(out)>::value_type;
        std::vector<T> mean(n), rstd(n);
        fwd(out.data(), mean.data(), rstd.data(), in[0].data(), in[1].data(), in[2].data(), n, C);
      };
      impl.backward = [fwd, bwd](const auto& in, const auto& dout, auto& din) {
        using T = typename std::decay_t<decltype(dout)>::value_type;
        std::vector<T> out(n * C), mean(n), rstd(n);
        fwd(out.data(), mean.data(), rstd.data(), in[0].data(), in[1].data(), in[2].data(), n, C);
        bwd(din[0].data(), din[1].data(), din[2].data(), dout.data(), in[0].data(), in[1].data(),
            mean.data(), rstd.data(), n, C);
      };
    };
    make(c.reference, nn::reference::layernorm_forward, nn::reference::layernorm_backward);
    make(c.opt64, nn::layernorm_forward<double>, nn::layernorm_backward<double>);
    make(c.opt32, nn::layernorm_forward<float>, nn::layernorm_backward<float>);
    cases.push_back(c);
  }
  {
    static constexpr int n = 6, C = 8, H = 2;
    LayerCase c;
    c.name = "attention";
    c.sizes = {n * 3 * C};
    c.out_size = n * C;
    // logits (hs + 2), softmax (n + 3), weighted sum (n): the exp amplifies the logit error by 1.
    c.forward_path = C / H + 3 * n + 8;
    c.backward_path = C / H + 4 * n + 12;
    c.make = [](std::mt19937_64& rng) { draw_log_weights(rng, n, n); };
    c.reference.forward = [](const auto& in, auto& out) {
      std::vector<double> att(H * n * n);
      nn::reference::attention_forward(out.data(), att.data(), in[0].data(), shared.log_a.data(), n,
                                       C, H);
    };
    c.reference.backward = [](const auto& in, const auto& dout, auto& din) {
      std::vector<double> att(H * n * n), out(n * C);
      nn::reference::attention_forward(out.data(), att.data(), in[0].data(), shared.log_a.data(), n,
                                       C, H);
      nn::reference::attention_backward(din[0].data(), dout.data(), in[0].data(), att.data(), n, C,
                                        H);
    };
    auto opt = [](auto& impl, const auto& log_a) {
      impl.forward = [&log_a](const auto& in, auto& out) {
        using T = typename std::decay_t<decltype(out)>::value_type;
        std::vector<T> att(H * n * n);
        nn::attention_forward(out.data(), att.data(), in[0].data(), log_a.data(), n, C, H);
      };
      impl.backward = [&log_a](const auto& in, const auto& dout, auto& din) {
        using T = typename std::decay_t<decltype(dout)>::value_type;
        std::vector<T> att(H * n * n), out(n * C), scratch(n * n);
        nn::attention_forward(out.data(), att.data(), in[0].data(), log_a.data(), n, C, H);
        nn::attention_backward(din[0].data(), scratch.data(), dout.data(), in[0].data(), att.data(),
                               n, C, H);
      };
    };
    opt(c.opt64, shared.log_a);
    opt(c.opt32, shared.log_a32);
    cases.push_back(c);
  }
  {
    static constexpr int N = 40;
    LayerCase c;
    c.name = "gelu";
    c.sizes = {N};
    c.out_size = N;
    c.forward_path = 12;  // the cubic, tanh (a few ulps), the products
    c.backward_path = 20;
    auto make = [](auto& impl, auto fwd, auto bwd) {
      impl.forward = [fwd](const auto& in, auto& out) { fwd(out.data(), in[0].data(), N); };
      impl.backward = [bwd](const auto& in, const auto& dout, auto& din) {
        bwd(din[0].data(), in[0].data(), dout.data(), N);
      };
    };
    make(c.reference, nn::reference::gelu_forward, nn::reference::gelu_backward);
    make(c.opt64, nn::gelu_forward<double>, nn::gelu_backward<double>);
    make(c.opt32, nn::gelu_forward<float>, nn::gelu_backward<float>);
    cases.push_back(c);
  }
  {
    static constexpr int n = 4, m = 5, k = 6;
    LayerCase c;
    c.name = "cost";
    c.sizes = {n * k, m * k};
    c.out_size = n * m;
    c.forward_path = k + 2;
    c.backward_path = std::max(n, m) + 2;
    auto make = [](auto& impl, auto fwd, auto bwd) {
      impl.forward = [fwd](const auto& in, auto& out) {
        fwd(out.data(), in[0].data(), in[1].data(), n, m, k);
      };
      impl.backward = [bwd](const auto& in, const auto& dout, auto& din) {
        bwd(din[0].data(), din[1].data(), dout.data(), in[0].data(), in[1].data(), n, m, k);
      };
    };
    make(c.reference, nn::reference::cost_forward, nn::reference::cost_backward);
    make(c.opt64, nn::cost_forward<double>, nn::cost_backward<double>);
    make(c.opt32, nn::cost_forward<float>, nn::cost_backward<float>);
    cases.push_back(c);
  }
  {
    static constexpr int n = 4, m = 5, iters = 7;
    constexpr double eps = 0.7;
    LayerCase c;
    c.name = "sinkhorn";
    c.sizes = {n * m};
    c.out_size = n * m;
    // Each half step is a log-sum-exp over n or m terms of size |C|/eps ~ 1.5; the maps are
    // contractions in the sup-norm (on potentials modulo constants), so errors add over the
    // iterations instead of growing: path ~ iters (n + m + 8).
    c.forward_path = iters * (n + m + 8);
    c.backward_path = 2 * iters * (n + m + 8);
    c.make = [](std::mt19937_64& rng) { draw_log_weights(rng, n, m); };
    c.reference.forward = [](const auto& in, auto& out) {
      std::vector<double> uh(iters * n), vh(iters * m);
      nn::reference::sinkhorn_forward(out.data(), uh.data(), vh.data(), in[0].data(),
                                      shared.log_a.data(), shared.log_b.data(), eps, iters, n, m);
    };
    c.reference.backward = [](const auto& in, const auto& dout, auto& din) {
      std::vector<double> uh(iters * n), vh(iters * m), out(n * m);
      nn::reference::sinkhorn_forward(out.data(), uh.data(), vh.data(), in[0].data(),
                                      shared.log_a.data(), shared.log_b.data(), eps, iters, n, m);
      nn::reference::sinkhorn_backward(din[0].data(), dout.data(), uh.data(), vh.data(),
                                       in[0].data(), shared.log_a.data(), shared.log_b.data(), eps,
                                       iters, n, m);
    };
    auto opt = [](auto& impl, const auto& log_a, const auto& log_b) {
      impl.forward = [&log_a, &log_b](const auto& in, auto& out) {
        using T = typename std::decay_t<decltype(out)>::value_type;
        std::vector<T> rw(iters * n * m), cw(iters * n * m), u(n), v(m);
        nn::sinkhorn_forward(out.data(), rw.data(), cw.data(), u.data(), v.data(), in[0].data(),
                             log_a.data(), log_b.data(), T(eps), iters, n, m);
      };
      impl.backward = [&log_a, &log_b](const auto& in, const auto& dout, auto& din) {
        using T = typename std::decay_t<decltype(dout)>::value_type;
        std::vector<T> rw(iters * n * m), cw(iters * n * m), u(n), v(m), out(n * m),
            scratch(n + 2 * m);
        nn::sinkhorn_forward(out.data(), rw.data(), cw.data(), u.data(), v.data(), in[0].data(),
                             log_a.data(), log_b.data(), T(eps), iters, n, m);
        nn::sinkhorn_backward(din[0].data(), scratch.data(), dout.data(), rw.data(), cw.data(),
                              T(eps), iters, n, m);
      };
    };
    opt(c.opt64, shared.log_a, shared.log_b);
    opt(c.opt32, shared.log_a32, shared.log_b32);
    cases.push_back(c);
  }
  {
    static constexpr int n = 3, m = 4;
    LayerCase c;
    c.name = "kl";
    c.sizes = {n * m};  // log_plan; the target is data
    c.out_size = 1;
    c.forward_path = n * m + 4;
    c.backward_path = 2;
    c.make = [](std::mt19937_64& rng) {
      std::uniform_real_distribution<double> uni(0.0, 1.0);
      shared.target.assign(n * m, 0.0);
      for (auto& t : shared.target)
        t = uni(rng) < 0.3 ? 0.0 : static_cast<float>(uni(rng));  // zeros too
      shared.target32.assign(shared.target.begin(), shared.target.end());
    };
    c.reference.forward = [](const auto& in, auto& out) {
      out[0] = nn::reference::kl_forward(shared.target.data(), in[0].data(), n, m);
    };
    c.reference.backward = [](const auto&, const auto& dout, auto& din) {
      for (int i = 0; i < n * m; ++i) din[0][i] -= dout[0] * shared.target[i];
    };
    auto opt = [](auto& impl, const auto& target) {
      impl.forward = [&target](const auto& in, auto& out) {
        out[0] = nn::kl_forward(target.data(), in[0].data(), n, m);
      };
      impl.backward = [&target](const auto&, const auto& dout, auto& din) {
        nn::kl_backward(din[0].data(), target.data(), dout[0], n, m);
      };
    };
    opt(c.opt64, shared.target);
    opt(c.opt32, shared.target32);
    cases.push_back(c);
  }
  {
    // The generalized KL of an unbalanced final layer: + sum (exp(log_plan) - target). The sum has
    // 2 n m terms; each term's exp adds one rounding (glibc's exp is correctly rounded to within
    // an ulp); the gradient -target + exp(log_plan) takes four.
    static constexpr int n = 3, m = 4;
    LayerCase c;
    c.name = "kl_mass";
    c.sizes = {n * m};
    c.out_size = 1;
    c.forward_path = 2 * n * m + 6;
    c.backward_path = 4;
    c.make = [](std::mt19937_64& rng) {
      std::uniform_real_distribution<double> uni(0.0, 1.0);
      shared.target.assign(n * m, 0.0);
      for (auto& t : shared.target) t = uni(rng) < 0.3 ? 0.0 : static_cast<float>(uni(rng));
      shared.target32.assign(shared.target.begin(), shared.target.end());
    };
    c.reference.forward = [](const auto& in, auto& out) {
      out[0] = nn::reference::kl_forward(shared.target.data(), in[0].data(), n, m, true);
    };
    c.reference.backward = [](const auto& in, const auto& dout, auto& din) {
      for (int i = 0; i < n * m; ++i) din[0][i] += dout[0] * (std::exp(in[0][i]) - shared.target[i]);
    };
    auto opt = [](auto& impl, const auto& target) {
      impl.forward = [&target](const auto& in, auto& out) {
        out[0] = nn::kl_forward(target.data(), in[0].data(), n, m, true);
      };
      impl.backward = [&target](const auto& in, const auto& dout, auto& din) {
        nn::kl_backward(din[0].data(), target.data(), dout[0], n, m, in[0].data());
      };
    };
    opt(c.opt64, shared.target);
    opt(c.opt32, shared.target32);
    cases.push_back(c);
  }
  return cases;
}

// Random inputs that float32 represents exactly (so all three implementations see the same).
Tensors<double> random_inputs(std::mt19937_64& rng, const LayerCase& c) {
  if (c.make) c.make(rng);
  Tensors<double> in;
  for (std::size_t s : c.sizes) {
    auto v = random_vector(rng, s);
    for (auto& x : v) x = static_cast<float>(x);
    in.push_back(std::move(v));
  }
  return in;
}

template <class T>
Tensors<T> zeros_like(const Tensors<double>& in) {
  Tensors<T> z;
  for (const auto& t : in) z.emplace_back(t.size(), T(0));
  return z;
}

class Layers : public ::testing::TestWithParam<LayerCase> {};

template <class T>
void check_against_reference(const LayerCase& c, const Impl<T>& impl, double unit) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  const Tensors<double> in = random_inputs(rng, c);
  std::vector<double> want(c.out_size);
  c.reference.forward(in, want);
  std::vector<T> got(c.out_size);
  impl.forward(cast<T>(in), got);
  // Both sides round along paths of forward_path operations on values of size <= max(1, |out|).
  const double fwd_bound = 2.0 * c.forward_path * unit * (1.0 + max_abs(want));
  for (std::size_t i = 0; i < c.out_size; ++i)
    ASSERT_NEAR(static_cast<double>(got[i]), want[i], fwd_bound)
        << c.name << " output " << i << " seed " << seed;

  std::vector<double> dout = random_vector(rng, c.out_size);
  for (auto& x : dout) x = static_cast<float>(x);
  Tensors<double> dwant = zeros_like<double>(in);
  c.reference.backward(in, dout, dwant);
  Tensors<T> dgot = zeros_like<T>(in);
  impl.backward(cast<T>(in), std::vector<T>(dout.begin(), dout.end()), dgot);
  for (std::size_t t = 0; t < in.size(); ++t) {
    const double bwd_bound =
        2.0 * (c.forward_path + c.backward_path) * unit * (1.0 + max_abs(dwant[t]));
    for (std::size_t i = 0; i < in[t].size(); ++i)
      ASSERT_NEAR(static_cast<double>(dgot[t][i]), dwant[t][i], bwd_bound)
          << c.name << " input " << t << " entry " << i << " seed " << seed;
  }
}

TEST_P(Layers, Float64AgreesWithReference) {
  check_against_reference(GetParam(), GetParam().opt64, kUnit64);
}
TEST_P(Layers, Float32AgreesWithReference) {
  check_against_reference(GetParam(), GetParam().opt32, kUnit32);
}

// L(theta) = <R, forward(theta)> for a fixed random R; its gradient is backward(dout = R).
void check_gradient_of(const LayerCase& c, const Impl<double>& impl) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  const Tensors<double> in = random_inputs(rng, c);
  const std::vector<double> R = random_vector(rng, c.out_size);
  Eigen::VectorXd theta(
      static_cast<Eigen::Index>(std::accumulate(c.sizes.begin(), c.sizes.end(), std::size_t{0})));
  auto unpack = [&](const Eigen::VectorXd& v) {
    Tensors<double> t = in;
    Eigen::Index k = 0;
    for (auto& x : t)
      for (auto& e : x) e = v[k++];
    return t;
  };
  {
    Eigen::Index k = 0;
    for (const auto& x : in)
      for (double e : x) theta[k++] = e;
  }
  double f_scale = 0.0;
  auto f = [&](const Eigen::VectorXd& v) {
    std::vector<double> out(c.out_size);
    impl.forward(unpack(v), out);
    double s = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) s += R[i] * out[i];
    return s;
  };
  {
    std::vector<double> out(c.out_size);
    impl.forward(in, out);
    for (std::size_t i = 0; i < out.size(); ++i)
      f_scale += std::abs(R[i]) * (1.0 + std::abs(out[i]));
  }
  Tensors<double> din = zeros_like<double>(in);
  impl.backward(in, R, din);
  Eigen::VectorXd analytic(theta.size());
  {
    Eigen::Index k = 0;
    for (const auto& x : din)
      for (double e : x) analytic[k++] = e;
  }
  GradientCheckOptions opt;
  // f sums out_size terms, each off by forward_path roundings.
  opt.function_error = (c.forward_path + static_cast<double>(c.out_size)) * kUnit64;
  opt.f_scale = f_scale;
  const GradientCheckResult r = check_gradient(f, theta, analytic, opt);
  EXPECT_TRUE(r.ok) << c.name << ": " << r.report() << " seed " << seed;
  EXPECT_EQ(r.coordinates_checked, theta.size());
}

TEST_P(Layers, ReferenceBackwardMatchesFiniteDifferences) {
  check_gradient_of(GetParam(), GetParam().reference);
}
TEST_P(Layers, OptimizedBackwardMatchesFiniteDifferences) {
  check_gradient_of(GetParam(), GetParam().opt64);
}

INSTANTIATE_TEST_SUITE_P(All, Layers, ::testing::ValuesIn(all_layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& p) { return p.param.name; });

// The checker must fail a wrong gradient, or its passes mean nothing.
TEST(GradientChecker, RejectsAWrongGradient) {
  auto f = [](const Eigen::VectorXd& v) { return std::sin(v[0]) * v[1] + v[1] * v[1] * v[1]; };
  Eigen::VectorXd x(2);
  x << 0.3, -1.2;
  Eigen::VectorXd good(2);
  good << std::cos(0.3) * -1.2, std::sin(0.3) + 3 * 1.44;
  EXPECT_TRUE(check_gradient(f, x, good).ok) << check_gradient(f, x, good).report();
  Eigen::VectorXd bad = good;
  bad[1] *= 1.0 + 1e-6;  // a relative error of 1e-6 is far above the finite-difference error
  EXPECT_FALSE(check_gradient(f, x, bad).ok);
  Eigen::VectorXd nan = good;
  nan[0] = std::nan("");
  EXPECT_FALSE(check_gradient(f, x, nan).ok);
}

// ---- the Sinkhorn layer's invariants
// ----------------------------------------------------------------
TEST(SinkhornLayer, ColumnsAreExactAndManyIterationsGiveTheOTLoopsPlan) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  constexpr int n = 9, m = 7, iters = 400;
  const double eps = 0.5;
  const Eigen::MatrixXd Q = testing::random_matrix(rng, n, 3, 1.0),
                        K = testing::random_matrix(rng, m, 3, 1.0);
  RowMatrix cost = -(Q * K.transpose()) / std::sqrt(3.0);
  draw_log_weights(rng, n, m);
  Eigen::VectorXd a(n), b(m);
  for (int i = 0; i < n; ++i) a[i] = std::exp(shared.log_a[i]);
  for (int j = 0; j < m; ++j) b[j] = std::exp(shared.log_b[j]);
  a /= a.sum();
  b /= b.sum();
  for (int i = 0; i < n; ++i) shared.log_a[i] = std::log(a[i]);
  for (int j = 0; j < m; ++j) shared.log_b[j] = std::log(b[j]);
  std::vector<double> log_plan(n * m), rw(iters * n * m), cw(iters * n * m), u(n), v(m);
  nn::sinkhorn_forward(log_plan.data(), rw.data(), cw.data(), u.data(), v.data(), cost.data(),
                       shared.log_a.data(), shared.log_b.data(), eps, iters, n, m);
  const Eigen::Map<const RowMatrix> logp(log_plan.data(), n, m);
  const RowMatrix plan = logp.array().exp();
  // Columns: the last half step makes them exact up to the rounding of an n-term sum.
  for (int j = 0; j < m; ++j)
    EXPECT_NEAR(plan.col(j).sum(), b[j], 4 * (n + 8) * kUnit64) << "column " << j;
  // The library's convergence-driven loop on the same cost (f = eps u, g = eps v).
  SinkhornOptions opt;
  opt.epsilon = eps;
  opt.tol = 1e-13;
  opt.want_plan = true;
  const SinkhornResult lib = sinkhorn(DenseSoftMin(cost), a, b, opt);
  ASSERT_TRUE(lib.converged);
  // 400 iterations at eps = 0.5 on |C| <~ 3 converge far below 1e-13 (the contraction factor is
  // about tanh(|C|_osc / 2 eps)^2 per iteration); both plans are then within tol of the fixed
  // point.
  EXPECT_LE((plan - lib.plan).cwiseAbs().maxCoeff(), 1e-12) << "seed " << seed;
}

}  // namespace
}  // namespace tokenflow
