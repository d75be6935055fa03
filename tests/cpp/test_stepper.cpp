// The stepper (src/integrator/stepper.hpp) on closed-form ODEs: rk4 is its Taylor polynomial on a
// linear ODE and fourth order, dopri5 meets its tolerance, steps are cut exactly at layer
// boundaries and land on marks, a run stopped and resumed from its clock is bit for bit the
// uninterrupted one, and dopri5's floor ends a run at a singularity.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "../../src/integrator/stepper.hpp"
#include "test_util.hpp"

namespace tokenflow {
namespace {

using Vector = Eigen::VectorXd;
using testing::kEps;

// y' = A y.
struct Linear {
  Eigen::MatrixXd A;
  void operator()(double /*t*/, const Vector& y, Vector& dy) const { dy = A * y; }
};

// y' = c(t) with c = 1 on [0, 0.3), 2 on [0.3, 0.7), 3 from 0.7 on: y(1) = 0.3 + 0.8 + 0.9 = 2.
struct Piecewise {
  void operator()(double t, const Vector& y, Vector& dy) const {
    dy = Vector::Constant(y.size(), t < 0.3 ? 1.0 : (t < 0.7 ? 2.0 : 3.0));
  }
};

// Records the accepted steps.
template <class State>
struct Recorder : stepping::StepHooks<State> {
  std::vector<stepping::StepEvent<State>> events;
  bool after_step(State& /*y*/, const stepping::StepEvent<State>& event) {
    events.push_back(event);
    events.back().last_stage = nullptr;  // points into the stepper's workspace
    return true;
  }
};

RunSpec spec(Integrator integrator, double T, double dt, double tol = 1e-10) {
  RunSpec run;
  run.integrator = integrator;
  run.T = T;
  run.dt = dt;
  run.tol = tol;
  return run;
}

// A contracting spiral: A + A^T = -I, so |e^{At}| <= 1 and the flow never amplifies an error.
Eigen::MatrixXd spiral() {
  Eigen::MatrixXd A(2, 2);
  A << -0.5, 2.0, -2.0, -0.5;
  return A;
}

TEST(Stepper, Rk4IsItsTaylorPolynomialOnALinearOde) {
  // On y' = A y one rk4 step multiplies y by R(hA) = I + hA + (hA)^2/2 + (hA)^3/6 + (hA)^4/24
  // exactly, so N steps give R(hA)^N y0 up to rounding: each step adds about 16 eps |y| (a dozen
  // roundings of terms no larger than |y|), and |R(hA)| <= 1 for this contracting A keeps them from
  // growing: N 16 eps |y0| in all.
  const Linear f{spiral()};
  const RunSpec run = spec(Integrator::rk4, 1.0, 0.01);
  const long N = fixed_step_count(run);
  ASSERT_EQ(N, 100);
  Vector y(2);
  y << 1.0, -0.5;
  const Vector y0 = y;
  stepping::Stepper<Vector, const Linear> stepper(f, run, y, {});
  Recorder<Vector> hooks;
  stepper.run(y, hooks, {});
  const Eigen::MatrixXd hA = run.dt * f.A;
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(2, 2);
  const Eigen::MatrixXd R = I + hA + hA * hA / 2 + hA * hA * hA / 6 + hA * hA * hA * hA / 24;
  Vector expected = y0;
  for (long k = 0; k < N; ++k) expected = R * expected;
  EXPECT_LE((y - expected).norm(), double(N) * 16 * kEps * y0.norm());
  EXPECT_EQ(stepper.clock().steps, N);
  EXPECT_EQ(stepper.clock().t, run.T);
  ASSERT_EQ(hooks.events.size(), std::size_t(N));
  // Step k starts at k dt (a product, not a sum of steps) and ends at k dt + dt (one rounding, or
  // none when the compiler fuses it: within eps (k + 1) dt), the last one at T exactly.
  for (long k = 0; k < N; ++k) {
    EXPECT_EQ(hooks.events[k].t_start, double(k) * run.dt);
    if (k + 1 < N) {
      EXPECT_NEAR(hooks.events[k].t, double(k + 1) * run.dt, kEps * double(k + 1) * run.dt);
    }
  }
  EXPECT_EQ(hooks.events.back().t, run.T);
}

TEST(Stepper, Rk4GlobalErrorIsItsLeadingTerm) {
  // y' = lambda y: R(z) = e^z - z^5 / 120 + O(z^6) for z = lambda h, so after N = T / h steps
  // y_N - e^{lambda T} = -N z^5 / 120 e^{lambda T} (1 + r) with |r| <= |z| (the next Taylor term is
  // z / 6 of the leading one, and the factor e^{-z} per step adds |z|): the error is O(h^4) with
  // this constant. Rounding adds at most N 16 eps (as above).
  for (const double h : {0.02, 0.01}) {
    const double lambda = -1.0, T = 1.0, z = lambda * h;
    Linear f{Eigen::MatrixXd::Constant(1, 1, lambda)};
    const RunSpec run = spec(Integrator::rk4, T, h);
    Vector y = Vector::Ones(1);
    stepping::Stepper<Vector, const Linear> stepper(f, run, y, {});
    stepping::StepHooks<Vector> none;
    stepper.run(y, none, {});
    const double N = T / h, exact = std::exp(lambda * T);
    const double predicted = -N * std::pow(z, 5) / 120 * exact;
    EXPECT_NEAR(y[0] - exact, predicted, std::abs(z) * std::abs(predicted) + N * 16 * kEps) << "h = " << h;
  }
}

TEST(Stepper, Rk4InSinglePrecisionFollowsDouble) {
  // The particles' State: a row-major float matrix. Each step rounds about a dozen times in float
  // (unit roundoff u = 2^-24, h and the coefficients rounded to float too), so after N steps the
  // float run is within N 16 u |y| of the double one.
  using Floats = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  struct Decay {
    void operator()(double /*t*/, const Floats& y, Floats& dy) const { dy = -y; }
  };
  const Decay f;
  const RunSpec run = spec(Integrator::rk4, 1.0, 0.01);
  Floats y(3, 2);
  y << 1, 2, -1, 0.5, 3, -2;
  const Floats y0 = y;
  stepping::Stepper<Floats, const Decay> stepper(f, run, y, {});
  stepping::StepHooks<Floats> none;
  stepper.run(y, none, {});
  const double u = std::ldexp(1.0, -24), N = 100;
  const Eigen::MatrixXd exact = y0.cast<double>() * std::exp(-1.0);  // rk4's own error is 3e-11 here
  EXPECT_LE((y.cast<double>() - exact).cwiseAbs().maxCoeff(), N * 16 * u * y0.cwiseAbs().maxCoeff());
}

TEST(Stepper, FixedStepsAreCutExactlyAtLayerBoundaries) {
  // dt = 0.25 puts both boundaries inside steps. Cut there, every substep integrates a constant, and
  // euler and rk4 are exact up to rounding (a few roundings of numbers <= 2 per substep, 6
  // substeps): y(1) = 2. Without the cut the step [0.25, 0.5] alone would be off by 0.05.
  for (const Integrator integrator : {Integrator::euler, Integrator::rk4}) {
    const Piecewise f;
    const RunSpec run = spec(integrator, 1.0, 0.25);
    Vector y = Vector::Zero(1);
    stepping::Stepper<Vector, const Piecewise> stepper(f, run, y, stepping::TimeCuts({0.3, 0.7}));
    Recorder<Vector> hooks;
    stepper.run(y, hooks, {});
    EXPECT_NEAR(y[0], 2.0, 6 * 8 * kEps * 2.0) << to_string(integrator);
    ASSERT_EQ(hooks.events.size(), 4u);
    EXPECT_EQ(hooks.events.back().t, 1.0);
    EXPECT_EQ(stepper.clock().steps, 4);
  }
}

TEST(Stepper, Dopri5LandsExactlyOnBoundariesAndMarks) {
  // Steps end exactly at the layer boundaries 0.3 and 0.7 (flagged at_boundary) and at the mark
  // 0.5 (flagged at_mark), never cross them, and the last ends at T. The field is constant in each
  // layer, so the result is exact up to rounding (a few roundings of numbers <= 2 per step).
  const Piecewise f;
  const RunSpec run = spec(Integrator::dopri5, 1.0, 0.25, 1e-8);
  Vector y = Vector::Zero(1);
  stepping::Stepper<Vector, const Piecewise> stepper(f, run, y, stepping::TimeCuts({0.3, 0.7}),
                                                     stepping::TimeCuts({0.5}));
  Recorder<Vector> hooks;
  stepper.run(y, hooks, {});
  std::vector<double> boundaries, marks;
  double previous = 0.0;
  for (const auto& event : hooks.events) {
    EXPECT_EQ(event.t_start, previous);
    for (const double u : {0.3, 0.5, 0.7}) EXPECT_FALSE(event.t_start < u && u < event.t) << "crossed " << u;
    if (event.at_boundary) boundaries.push_back(event.t);
    if (event.at_mark) marks.push_back(event.t);
    previous = event.t;
  }
  EXPECT_EQ(boundaries, (std::vector<double>{0.3, 0.7}));
  EXPECT_EQ(marks, (std::vector<double>{0.5}));
  EXPECT_EQ(stepper.clock().t, 1.0);
  EXPECT_NEAR(y[0], 2.0, double(hooks.events.size()) * 8 * kEps * 2.0);
}

TEST(Stepper, Dopri5MeetsItsToleranceOnALinearOde) {
  // Each accepted step's error estimate is at most tol (1 + max|y|) per component in the RMS norm,
  // so at most sqrt(2) tol (1 + |y0|) in the 2-norm here (|y| <= |y0| on this contracting flow).
  // The estimate is the 4th-order solution's local error, which bounds the propagated 5th-order
  // one's; the flow does not amplify earlier errors (|e^{At}| <= 1), so the global error is at most
  // the sum over the accepted steps.
  for (const double tol : {1e-6, 1e-9}) {
    const Linear f{spiral()};
    const RunSpec run = spec(Integrator::dopri5, 5.0, 0.1, tol);
    Vector y(2);
    y << 1.0, -0.5;
    const Vector y0 = y;
    stepping::Stepper<Vector, const Linear> stepper(f, run, y, {});
    stepping::StepHooks<Vector> none;
    stepper.run(y, none, {});
    Eigen::MatrixXd rotation(2, 2);
    rotation << std::cos(2 * run.T), std::sin(2 * run.T), -std::sin(2 * run.T), std::cos(2 * run.T);
    const Vector exact = std::exp(-0.5 * run.T) * rotation * y0;
    const double bound = double(stepper.clock().steps) * std::sqrt(2.0) * tol * (1.0 + y0.norm());
    EXPECT_LE((y - exact).norm(), bound) << "tol = " << tol;
    EXPECT_EQ(stepper.clock().t, run.T);
  }
}

// Stops the run after `stop_after` steps through the progress callback and keeps what a checkpoint
// keeps at that point.
struct Snapshot : stepping::StepHooks<Vector> {
  const stepping::Stepper<Vector, const Linear>* stepper = nullptr;
  stepping::StepClock clock;
  Vector y, first_stage;
  void at_rest(const Vector& state, bool stop) {
    if (!stop) return;
    clock = stepper->clock();
    y = state;
    first_stage = stepper->first_stage();
  }
};

TEST(Stepper, AStoppedRunResumesBitForBit) {
  for (const Integrator integrator : {Integrator::rk4, Integrator::dopri5}) {
    const Linear f{spiral()};
    const RunSpec run = spec(integrator, 2.0, 0.05, 1e-9);
    Vector y0(2);
    y0 << 1.0, -0.5;
    const stepping::TimeCuts cuts({0.33});
    Vector full = y0;
    stepping::Stepper<Vector, const Linear> uninterrupted(f, run, full, cuts);
    stepping::StepHooks<Vector> none;
    uninterrupted.run(full, none, {});

    Vector y = y0;
    stepping::Stepper<Vector, const Linear> first(f, run, y, cuts);
    Snapshot snapshot;
    snapshot.stepper = &first;
    EXPECT_THROW(first.run(y, snapshot, [](const Progress& p) { return p.steps < 7; }), Cancelled);
    ASSERT_EQ(snapshot.clock.steps, 7);
    stepping::Stepper<Vector, const Linear> second(f, run, snapshot.y, cuts);
    second.clock() = snapshot.clock;
    second.first_stage() = snapshot.first_stage;
    Vector resumed = snapshot.y;
    second.run(resumed, none, {});
    EXPECT_TRUE((resumed.array() == full.array()).all()) << to_string(integrator);
    EXPECT_EQ(second.clock().steps, uninterrupted.clock().steps);
    EXPECT_EQ(second.clock().rejected, uninterrupted.clock().rejected);
    EXPECT_EQ(second.clock().t, run.T);
  }
}

TEST(Stepper, Dopri5FloorEndsARunAtItsSingularity) {
  // y' = y^2, y(0) = 1: y = 1 / (1 - t), singular at t* = 1. The steps shrink with 1 - t until a
  // rejection at the floor ends the run; there t* - t is within kSingularReach floors (run_spec.hpp)
  // and the hook gets f(y) = y^2 at that t.
  struct Square {
    void operator()(double /*t*/, const Vector& y, Vector& dy) const { dy = y.cwiseProduct(y); }
  };
  struct Floor : stepping::StepHooks<Vector> {
    bool reached = false;
    double t = 0.0, floor = 0.0, y = 0.0, rate = 0.0;
    void at_floor(const Vector& state, const stepping::FloorEvent<Vector>& event) {
      reached = true;
      t = event.t;
      floor = event.floor;
      y = state[0];
      rate = event.rate[0];
    }
  };
  const Square f;
  const RunSpec run = spec(Integrator::dopri5, 2.0, 0.1, 1e-10);
  Vector y = Vector::Ones(1);
  stepping::Stepper<Vector, const Square> stepper(f, run, y, {});
  Floor hooks;
  stepper.run(y, hooks, {});
  ASSERT_TRUE(hooks.reached);
  EXPECT_LT(hooks.t, 1.0);
  EXPECT_LE(1.0 - hooks.t, kSingularReach * hooks.floor);
  EXPECT_EQ(hooks.rate, hooks.y * hooks.y);
  EXPECT_GT(stepper.clock().rejected, 0);
}

}  // namespace
}  // namespace tokenflow
