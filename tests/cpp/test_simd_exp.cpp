// simd::exp_poly against the C library's exp, evaluated through a `#pragma omp simd` loop (the
// vectorized code the kernels run): the error stays within kExpUlps units in the last place on the
// whole domain, and the edges (masked -inf, NaN, under- and overflow) behave as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../../src/simd/exp.hpp"
#include "test_util.hpp"

namespace tokenflow {
namespace {

template <class T>
std::vector<T> exp_poly_of(const std::vector<T>& x) {
  std::vector<T> y(x.size());
  const T* xp = x.data();
  T* yp = y.data();
  const auto count = static_cast<std::ptrdiff_t>(x.size());
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < count; ++i) yp[i] = simd::exp_poly(xp[i]);
  return y;
}

// |got - want| in units of the last place of want (want normal, so its ulp is 2^(e - p + 1)).
template <class T>
double ulps(T got, long double want) {
  int e = 0;
  std::frexp(static_cast<double>(want), &e);
  const long double ulp = std::ldexp(1.0L, e - std::numeric_limits<T>::digits);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

TEST(SimdExp, FloatWithinBoundOnSampledFloats) {
  // Every 101st float bit pattern in [lo, hi] (1.8e7 of them): the reference is exp in long double.
  using C = simd::ExpConstants<float>;
  std::vector<float> x;
  auto add_range = [&](float from, float to) {  // from < to, both of one sign
    std::uint32_t a = std::bit_cast<std::uint32_t>(from), b = std::bit_cast<std::uint32_t>(to);
    if (a > b) std::swap(a, b);
    for (std::uint32_t u = a; u <= b; u += 101) x.push_back(std::bit_cast<float>(u));
  };
  add_range(-1e-30f, C::lo);
  add_range(1e-30f, C::hi);
  const std::vector<float> y = exp_poly_of(x);
  double worst = 0.0;
  float worst_x = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = ulps(y[i], std::exp(static_cast<long double>(x[i])));
    if (e > worst) worst = e, worst_x = x[i];
  }
  std::printf("[ tokenflow ] exp_poly<float>: %zu points, worst %.3f ulp at x = %.9g\n", x.size(), worst, worst_x);
  EXPECT_LE(worst, simd::kExpUlps);
}

TEST(SimdExp, DoubleWithinBoundOnRandomArguments) {
  std::mt19937_64 rng(testing::fresh_seed());
  using C = simd::ExpConstants<double>;
  std::uniform_real_distribution<double> wide(C::lo, C::hi), narrow(-1.0, 1.0), attention(-40.0, 0.0);
  std::vector<double> x;
  for (int i = 0; i < 1000000; ++i) x.push_back(wide(rng));
  for (int i = 0; i < 1000000; ++i) x.push_back(narrow(rng));
  for (int i = 0; i < 1000000; ++i) x.push_back(attention(rng));
  const std::vector<double> y = exp_poly_of(x);
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], std::exp(static_cast<long double>(x[i]))));
  std::printf("[ tokenflow ] exp_poly<double>: %zu points, worst %.3f ulp\n", x.size(), worst);
  EXPECT_LE(worst, simd::kExpUlps);
}

template <class T>
void check_edges() {
  using C = simd::ExpConstants<T>;
  const T inf = std::numeric_limits<T>::infinity();
  const std::vector<T> x{-inf, inf, std::numeric_limits<T>::quiet_NaN(), T(0), -T(0), C::lo, C::hi,
                         std::nextafter(C::lo, -inf), std::nextafter(C::hi, inf), T(-1e6), T(1e6), T(1)};
  const std::vector<T> y = exp_poly_of(x);
  EXPECT_EQ(y[0], T(0));     // a masked logit
  EXPECT_EQ(y[1], inf);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], T(1));
  EXPECT_EQ(y[4], T(1));
  EXPECT_GT(y[5], T(0));     // the domain's ends are inside it: normal, finite
  EXPECT_TRUE(std::isnormal(y[5]));
  EXPECT_TRUE(std::isfinite(y[6]));
  EXPECT_EQ(y[7], T(0));     // below lo: flushed to zero
  EXPECT_EQ(y[8], inf);      // above hi: +inf
  EXPECT_EQ(y[9], T(0));
  EXPECT_EQ(y[10], inf);
  EXPECT_LE(ulps(y[11], std::exp(1.0L)), simd::kExpUlps);
}

TEST(SimdExp, EdgesFloat) { check_edges<float>(); }
TEST(SimdExp, EdgesDouble) { check_edges<double>(); }

}  // namespace
}  // namespace tokenflow
