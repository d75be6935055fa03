// The Sinkhorn Transformer as a whole (tokenflow/model.hpp): the PyTorch golden fixture (forward,
// loss, every gradient, ten AdamW steps), the full backward pass against finite differences, the
// float32 path against float64, invariants, and model.bin.
#include <gtest/gtest.h>


#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "test_util.hpp"
#include "tokenflow/adamw.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/gradient_check.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/model.hpp"

namespace tokenflow {
namespace {

using testing::kUnit32;
using testing::kUnit64;
namespace fs = std::filesystem;

// Roundings on the longest path through the forward pass of one pair, for unit-size values: the
// inner dimension of every product and sum on the way (GEMMs, LayerNorm means, softmax sums, the
// Sinkhorn log-sum-exps). The backward pass runs the same path in reverse, about twice the work.
double forward_path(const ModelConfig& c, int n, int m) {
  const double C = c.width, F = c.mlp_ratio * c.width, hs = C / c.heads, t = std::max(n, m);
  const double block = (2 * C + 6) + C + (hs + 3 * t + 8) + C + (2 * C + 6) + C + 12 + F;
  return c.d + c.layers * block + (2 * C + 6) + C + c.k + c.sinkhorn_iters * (n + m + 8) + n * m;
}

struct PairData {
  Points<double> x, y;
  Eigen::VectorXd log_a, log_b;
  RowMatrix target;
  PairInput<double> input() const {
    PairInput<double> in;
    in.x = x.data();
    in.y = y.data();
    in.log_a = log_a.data();
    in.log_b = log_b.data();
    in.target = target.size() ? target.data() : nullptr;
    in.n = static_cast<int>(x.rows());
    in.m = static_cast<int>(y.rows());
    return in;
  }
};

PairData random_pair(std::mt19937_64& rng, int n, int m, int d) {
  PairData p;
  p.x = testing::random_matrix(rng, n, d, 1.0);
  p.y = testing::random_matrix(rng, m, d, 1.0);
  std::uniform_real_distribution<double> uni(0.5, 1.5);
  Eigen::VectorXd a(n), b(m);
  for (auto& v : a) v = uni(rng);
  for (auto& v : b) v = uni(rng);
  p.log_a = (a / a.sum()).array().log();
  p.log_b = (b / b.sum()).array().log();
  p.target = RowMatrix::NullaryExpr(n, m, [&] { return uni(rng) < 0.3 ? 0.0 : uni(rng); });
  p.target /= p.target.sum();
  return p;
}

// ---- the PyTorch golden fixture
// ------------------------------------------------------------------
const fs::path kFixture = fs::path(TOKENFLOW_SOURCE_DIR) / "tests/fixtures/sinkhorn_transformer";

std::vector<double> npy(const std::string& name) {
  return read_npy(kFixture / (name + ".npy")).data;
}

Points<double> npy_matrix(const std::string& name) {
  const NpyArray a = read_npy(kFixture / (name + ".npy"));
  const auto rows = static_cast<Eigen::Index>(a.shape.at(0));
  const auto cols = static_cast<Eigen::Index>(a.shape.size() > 1 ? a.shape[1] : 1);
  return Eigen::Map<const Points<double>>(a.data.data(), rows, cols);
}

using testing::max_abs;

class ModelFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const Config config = Config::from_file((kFixture / "config.toml").string());
    model = read_model_config(config, static_cast<int>(config.get_int("model.d", 0)));
    lr = config.get_double("train.lr", 0.0);
    weight_decay = config.get_double("train.weight_decay", 0.0);
    steps = static_cast<int>(config.get_int("train.steps", 0));
    params = npy("params");
    for (int p = 0; p < 2; ++p) {
      PairData d;
      d.x = npy_matrix("x" + std::to_string(p));
      d.y = npy_matrix("y" + std::to_string(p));
      d.log_a = npy_matrix("a" + std::to_string(p)).col(0).array().log();
      d.log_b = npy_matrix("b" + std::to_string(p)).col(0).array().log();
      d.target = npy_matrix("target" + std::to_string(p));
      pairs.push_back(d);
    }
  }
  // Mean loss of the batch and its gradient (the fixture's batch_loss + backward).
  double loss_and_gradient(const std::vector<double>& theta, std::vector<double>& grads) const {
    const ParameterLayout layout(model);
    grads.assign(layout.size(), 0.0);
    double loss = 0.0;
    for (const PairData& d : pairs) {
      PairWorkspace<double> ws;
      loss += pair_forward(layout, theta.data(), d.input(), ws) / 2.0;
      pair_backward(layout, theta.data(), grads.data(), d.input(), ws, 0.5);
    }
    return loss;
  }
  ModelConfig model;
  double lr = 0, weight_decay = 0;
  int steps = 0;
  std::vector<double> params;
  std::vector<PairData> pairs;
};

TEST_F(ModelFixture, LayoutMatchesPyTorch) {
  const ParameterLayout layout(model);
  std::ifstream in(kFixture / "layout.txt");
  std::string line;
  std::size_t i = 0, total = 0;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string name;
    ss >> name;
    std::vector<int> shape;
    for (int s; ss >> s;) shape.push_back(s);
    ASSERT_LT(i, layout.tensors().size());
    EXPECT_EQ(layout.tensors()[i].name, name);
    EXPECT_EQ(layout.tensors()[i].shape, shape) << name;
    EXPECT_EQ(layout.tensors()[i].offset, total) << name;
    total += layout.tensors()[i].size;
    ++i;
  }
  EXPECT_EQ(i, layout.tensors().size());
  EXPECT_EQ(total, params.size());
}

TEST_F(ModelFixture, ForwardLossAndGradientsMatchPyTorch) {
  const ParameterLayout layout(model);
  std::vector<double> grads(layout.size(), 0.0);
  double loss = 0.0, path = 0.0;
  for (int p = 0; p < 2; ++p) {
    const PairData& d = pairs[static_cast<std::size_t>(p)];
    const PairInput<double> in = d.input();
    path = std::max(path, forward_path(model, in.n, in.m));
    PairWorkspace<double> ws;
    loss += pair_forward(layout, params.data(), in, ws) / 2.0;
    // PyTorch and we each round along the same path in a different order: each side is within
    // path * u * (1 + |value|) of the exact value.
    for (const char* name : {"Q", "K", "log_plan"}) {
      const std::vector<double> want = npy(name + std::to_string(p));
      const double* got = name[0] == 'Q'   ? ws.q_acts.out
                          : name[0] == 'K' ? ws.k_acts.out
                                           : ws.log_plan;
      const double bound = 2.0 * path * kUnit64 * (1.0 + max_abs(want));
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], bound) << name << p << "[" << i << "]";
    }
    pair_backward(layout, params.data(), grads.data(), in, ws, 0.5);
  }
  const double want_loss = npy("loss")[0];
  EXPECT_NEAR(loss, want_loss, 2.0 * path * kUnit64 * (1.0 + std::abs(want_loss)));
  // The backward pass: the forward path and twice again.
  const std::vector<double> want = npy("grads");
  ASSERT_EQ(want.size(), grads.size());
  const double bound = 2.0 * 3.0 * path * kUnit64 * (1.0 + max_abs(want));
  for (const ParameterTensor& t : layout.tensors())
    for (std::size_t i = 0; i < t.size; ++i)
      ASSERT_NEAR(grads[t.offset + i], want[t.offset + i], bound) << t.name << "[" << i << "]";
}

TEST_F(ModelFixture, TenAdamWStepsMatchPyTorch) {
  const ParameterLayout layout(model);
  std::vector<unsigned char> decays(layout.size(), 0);
  for (const ParameterTensor& t : layout.tensors())
    std::fill_n(decays.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, t.decays ? 1 : 0);
  AdamWOptions opt;
  opt.weight_decay = weight_decay;
  AdamW<double> adam(decays, opt);
  std::vector<double> theta = params, grads;
  const std::vector<double> want_losses = npy("losses");
  ASSERT_EQ(static_cast<int>(want_losses.size()), steps);
  const double path = 3.0 * std::max(forward_path(model, 3, 4), forward_path(model, 5, 2));
  // The per-step gradient error (bound g_err below) moves each parameter by at most
  // lr * g_err / (|g_i| + eps) per step through Adam's normalized update m / sqrt(v) (and never
  // by more than 2 lr); summed over the steps with the first step's |g_i| (the gradients change by
  // O(lr) over ten steps).
  std::vector<double> first_grads;
  loss_and_gradient(theta, first_grads);
  const double g_err = 2.0 * path * kUnit64 * (1.0 + max_abs(first_grads));
  for (int s = 0; s < steps; ++s) {
    const double loss = loss_and_gradient(theta, grads);
    EXPECT_NEAR(loss, want_losses[static_cast<std::size_t>(s)],
                2.0 * path * kUnit64 * (1.0 + std::abs(loss)))
        << "step " << s;
    adam.step(theta.data(), grads.data(), lr);
  }
  const std::vector<double> want = npy("params_after");
  for (const ParameterTensor& t : layout.tensors())
    for (std::size_t i = 0; i < t.size; ++i) {
      const std::size_t k = t.offset + i;
      const double per_step =
          std::min(2.0 * lr, 4.0 * lr * g_err / (std::abs(first_grads[k]) + opt.eps));
      ASSERT_NEAR(theta[k], want[k], steps * per_step + 2.0 * path * kUnit64 * std::abs(want[k]))
          << t.name << "[" << i << "]";
    }
}

// ---- the full backward pass against finite differences
// ---------------------------------------------
// The whole model's backward against central differences of its loss; `implicit`: the converged
// final layer (model.sinkhorn_grad = "implicit") solved to tol 1e-14, whose stopping error adds
// to the evaluation error of the loss: a plan exact for marginals within tol of (a, b) has log
// entries within about kappa tol of the fixed point's, kappa the condition of the marginal map
// (layers.hpp's Schur system, testing::schur_condition of the plan), so the function error
// grows by kappa tol.
// `learned`: the relaxation lambda = eps / rho is a parameter (model.learn_marginal_penalty), from
// rho in [0.3, 3]; the loss adds the plan's mass term.
void check_model_gradient(bool share_encoders, bool implicit, bool learned = false) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  ModelConfig c;
  c.d = 3;
  c.width = 8;
  c.layers = 2;
  c.heads = 2;
  c.k = 5;
  c.mlp_ratio = 2;
  c.sinkhorn.epsilon = 0.8;
  c.sinkhorn_iters = 6;
  c.share_encoders = share_encoders;
  if (learned) {
    c.learn_marginal_penalty = true;
    c.sinkhorn.marginal_penalty = std::uniform_real_distribution<double>(0.3, 3.0)(rng);
  }
  if (implicit) {
    c.sinkhorn_grad = "implicit";
    c.sinkhorn.tol = 1e-14;
  }
  const ParameterLayout layout(c);
  std::vector<double> theta = init_parameters(layout, seed);
  // Non-trivial LayerNorm and bias parameters, so that every path carries a gradient.
  std::normal_distribution<double> normal(0.0, 0.1);
  for (const ParameterTensor& t : layout.tensors())
    if (t.shape.size() == 1)
      for (std::size_t i = 0; i < t.size; ++i) theta[t.offset + i] += normal(rng);
  const PairData d = random_pair(rng, 4, 6, c.d);
  PairWorkspace<double> ws;
  const PairInput<double> in = d.input();
  pair_forward(layout, theta.data(), in, ws);
  std::vector<double> grads(layout.size(), 0.0);
  pair_backward(layout, theta.data(), grads.data(), in, ws, 1.0);
  auto f = [&](const Eigen::VectorXd& v) {
    PairWorkspace<double> w;
    return pair_forward(layout, v.data(), in, w);
  };
  GradientCheckOptions opt;
  opt.function_error =
      forward_path(c, 4, 6) * kUnit64 +
      (implicit ? testing::schur_condition(ws.log_plan, 4, 6) * c.sinkhorn.tol : 0.0);
  // The loss sums target_ij (log target_ij - log_plan_ij): its terms have magnitude
  // sum_ij target_ij (|log target_ij| + |log_plan_ij|).
  opt.f_scale = 1.0;
  for (int k = 0; k < in.n * in.m; ++k)
    if (d.target.data()[k] > 0.0)
      opt.f_scale += d.target.data()[k] * (std::abs(std::log(d.target.data()[k])) + std::abs(ws.log_plan[k]));
  if (learned)  // the mass term sum_ij (plan_ij - target_ij)
    for (int k = 0; k < in.n * in.m; ++k) opt.f_scale += std::exp(ws.log_plan[k]) + d.target.data()[k];
  const Eigen::VectorXd x =
      Eigen::Map<const Eigen::VectorXd>(theta.data(), static_cast<Eigen::Index>(theta.size()));
  const Eigen::VectorXd g =
      Eigen::Map<const Eigen::VectorXd>(grads.data(), static_cast<Eigen::Index>(grads.size()));
  const GradientCheckResult r = check_gradient(f, x, g, opt);
  EXPECT_TRUE(r.ok) << r.report() << " seed " << seed;
  EXPECT_EQ(r.coordinates_checked, x.size());
  if (learned) {
    EXPECT_NE(grads[layout.relaxation()], 0.0);
  }
}

class ModelGradient : public ::testing::TestWithParam<bool> {};

TEST_P(ModelGradient, BackwardMatchesFiniteDifferences) { check_model_gradient(GetParam(), false); }

TEST_P(ModelGradient, ImplicitBackwardMatchesFiniteDifferences) { check_model_gradient(GetParam(), true); }

TEST(Model, LearnedRelaxationBackwardMatchesFiniteDifferences) { check_model_gradient(false, false, true); }

TEST(Model, LearnedRelaxationImplicitBackwardMatchesFiniteDifferences) { check_model_gradient(false, true, true); }

INSTANTIATE_TEST_SUITE_P(Encoders, ModelGradient, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Shared" : "Separate";
                         });

// ---- float32 against float64, invariants
// ---------------------------------------------------------
TEST(Model, Float32ForwardAndBackwardFollowFloat64) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  ModelConfig c;
  c.width = 16;
  c.heads = 2;
  c.k = 8;
  c.sinkhorn_iters = 10;
  const ParameterLayout layout(c);
  const std::vector<double> theta = init_parameters(layout, seed);
  const std::vector<float> theta32(theta.begin(), theta.end());
  PairData d = random_pair(rng, 7, 5, c.d);
  // Inputs representable in float32, so that both precisions see the same pair.
  d.x = d.x.cast<float>().cast<double>();
  d.y = d.y.cast<float>().cast<double>();
  d.log_a = d.log_a.cast<float>().cast<double>();
  d.log_b = d.log_b.cast<float>().cast<double>();
  d.target = d.target.cast<float>().cast<double>();
  const std::vector<double> th64(theta32.begin(), theta32.end());
  PairWorkspace<double> ws64;
  const double loss64 = pair_forward(layout, th64.data(), d.input(), ws64);
  std::vector<double> g64(layout.size(), 0.0);
  pair_backward(layout, th64.data(), g64.data(), d.input(), ws64, 1.0);

  const Points<float> x = d.x.cast<float>(), y = d.y.cast<float>();
  const Eigen::VectorXf la = d.log_a.cast<float>(), lb = d.log_b.cast<float>();
  const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> target =
      d.target.cast<float>();
  PairInput<float> in;
  in.x = x.data();
  in.y = y.data();
  in.log_a = la.data();
  in.log_b = lb.data();
  in.target = target.data();
  in.n = 7;
  in.m = 5;
  PairWorkspace<float> ws32;
  const float loss32 = pair_forward(layout, theta32.data(), in, ws32);
  std::vector<float> g32(layout.size(), 0.0f);
  pair_backward(layout, theta32.data(), g32.data(), in, ws32, 1.0f);
  const double path = forward_path(c, 7, 5);
  double plan_scale = 0.0;
  for (int i = 0; i < 35; ++i) plan_scale = std::max(plan_scale, std::abs(ws64.log_plan[i]));
  for (int i = 0; i < 35; ++i)
    EXPECT_NEAR(ws32.log_plan[i], ws64.log_plan[i], path * kUnit32 * (1.0 + plan_scale)) << i;
  EXPECT_NEAR(loss32, loss64, path * kUnit32 * (1.0 + plan_scale));
  double g_scale = 0.0;
  for (double v : g64) g_scale = std::max(g_scale, std::abs(v));
  for (std::size_t i = 0; i < g64.size(); ++i)
    ASSERT_NEAR(g32[i], g64[i], 3.0 * path * kUnit32 * (1.0 + g_scale))
        << "parameter " << i << " seed " << seed;
}

TEST(Model, PermutingTheTokensPermutesThePlan) {
  const auto seed = testing::fresh_seed();
  std::mt19937_64 rng(seed);
  ModelConfig c;
  c.width = 16;
  c.heads = 4;
  c.k = 8;
  SinkhornTransformer model;
  model.config = c;
  model.params = init_parameters(ParameterLayout(c), seed);
  const PairData d = random_pair(rng, 6, 9, 2);
  const Eigen::VectorXd a = d.log_a.array().exp(), b = d.log_b.array().exp();
  const RowMatrix plan = couple(model, d.x, d.y, a, b);
  // Columns of the coupling are exact, rows close after 30 iterations.
  EXPECT_LE((plan.colwise().sum().transpose() - b).cwiseAbs().maxCoeff(), 1e-14);
  std::vector<int> px(6), py(9);
  std::iota(px.begin(), px.end(), 0);
  std::iota(py.begin(), py.end(), 0);
  std::shuffle(px.begin(), px.end(), rng);
  std::shuffle(py.begin(), py.end(), rng);
  Points<double> x2(6, 2), y2(9, 2);
  Eigen::VectorXd a2(6), b2(9);
  for (int i = 0; i < 6; ++i) x2.row(i) = d.x.row(px[i]), a2[i] = a[px[i]];
  for (int j = 0; j < 9; ++j) y2.row(j) = d.y.row(py[j]), b2[j] = b[py[j]];
  const RowMatrix plan2 = couple(model, x2, y2, a2, b2);
  // Only the summation order changes: path * u on plan entries <= 1.
  const double bound = 2.0 * forward_path(c, 6, 9) * kUnit64;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 9; ++j)
      ASSERT_NEAR(plan2(i, j), plan(px[i], py[j]), bound) << "seed " << seed;
}

// A small model (width 8, two heads of k = 4, one layer) in dimension d, parameters from `seed`.
SinkhornTransformer small_model(int d, std::uint64_t seed) {
  SinkhornTransformer model;
  model.config.d = d;
  model.config.width = 8;
  model.config.heads = 2;
  model.config.k = 4;
  model.config.layers = 1;
  model.params = init_parameters(ParameterLayout(model.config), seed);
  return model;
}

// train() leaves config_toml empty (the library reads no config; the CLI and Python fill it):
// save_model then writes the [model] keys, and load_model rebuilds the same model from them.
TEST(Model, ModelWithoutItsConfigTextSavesItsModelKeys) {
  SinkhornTransformer model = small_model(3, 5);
  model.config.sinkhorn.epsilon = 0.7;  // keys that do not change the parameters' layout
  model.config.sinkhorn_iters = 11;
  const auto dir = testing::temp_dir("model-file-keys");
  save_model(dir / "model.bin", model);
  const SinkhornTransformer back = load_model(dir / "model.bin");
  EXPECT_EQ(back.params, model.params);
  EXPECT_EQ(back.config.d, 3);
  EXPECT_EQ(back.config.width, 8);
  EXPECT_EQ(back.config.heads, 2);
  EXPECT_EQ(back.config.k, 4);
  EXPECT_EQ(back.config.layers, 1);
  EXPECT_EQ(back.config.sinkhorn.epsilon, 0.7);
  EXPECT_EQ(back.config.sinkhorn_iters, 11);
  EXPECT_NE(back.config_toml.find("[model]"), std::string::npos);
}

TEST(Model, ModelFileRoundTripsAndRefusesCorruption) {
  SinkhornTransformer model = small_model(2, 3);
  model.config_toml = "[model]\nd = 2\nwidth = 8\nlayers = 1\nheads = 2\nk = 4\n";
  const auto dir = testing::temp_dir("model-file");
  save_model(dir / "model.bin", model);
  const SinkhornTransformer back = load_model(dir / "model.bin");
  EXPECT_EQ(back.params, model.params);
  EXPECT_EQ(back.config.width, 8);
  EXPECT_EQ(back.config_toml, model.config_toml);
  // Flip one byte in the parameters, then truncate: both refused, naming the file.
  std::string bytes;
  {
    std::ifstream in(dir / "model.bin", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const std::string& bad :
       {bytes.substr(0, bytes.size() / 2),
        bytes.substr(0, bytes.size() - 20) + std::string(1, char(bytes[bytes.size() - 20] ^ 1)) +
            bytes.substr(bytes.size() - 19),
        std::string("garbage")}) {
    std::ofstream(dir / "bad.bin", std::ios::binary) << bad;
    try {
      load_model(dir / "bad.bin");
      ADD_FAILURE() << "a corrupt model file was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.bin"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tokenflow
