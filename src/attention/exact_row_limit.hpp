// The share of exact rows beyond which the fast summation is slower than the dense kernel.
//
// The fast summation (docs/fast-summation.md) sums the rows its certificate rejects exactly, over
// every source in the log domain, each at the price of several dense rows. summation = "auto"
// gives a head back to the dense kernel when more than this share of its rows would be exact;
// summation = "fast" keeps going and the run's summary.json carries a warning instead.
#pragma once

namespace tokenflow {

inline constexpr double kFastExactRowLimit = 0.05;

}  // namespace tokenflow
