// The fused streaming attention kernel: tiles of queries against tiles of keys, with online
// (running-maximum) normalization, so that no n x n matrix exists. Written once against an
// evaluator (evaluators.hpp) and used for every kind, both precisions, the velocity and the
// interaction energy.
//
// For one query tile (kQueryTile rows) the kernel walks the visible key tiles (kKeyTile keys) in
// increasing order and, per key tile:
//   1. logits: S (rows x keys) = raw logits of the evaluator's form, in register blocks of
//      kLogitRows queries x 2 vectors of keys (the queries broadcast, the keys transposed and packed
//      by tile so that a vector holds consecutive keys): a small GEMM, or the squared distances;
//   2. weights: normalized kinds take the row maximum of the tile, rescale what the row has
//      accumulated when the maximum grows, and form p = a_j exp(s - max) with simd::exp_poly;
//      unnormalized kinds form p = a_j weight(s, i, j);
//   3. values: for kv <= kSmallValues, fused into step 2 (sum_j p v_j with the values transposed);
//      otherwise P (rows x keys) times V (keys x kv) in register blocks of kValueRows x 4 vectors.
// Partial sums of a tile are formed in T and added to double accumulators, so a float32 row sum
// carries the rounding of at most kKeyTile terms in float and of n / kKeyTile terms in double.
//
// Causal masks: the tokens are sorted by position (the driver does it once); query i then sees the
// keys [0, visible_end[i]), a prefix, so a query tile stops at the last key its last row sees and
// only the tiles on the diagonal are partially masked.
//
// Determinism: each query row is handled by one thread, and its sums run over key tiles in
// increasing order with a fixed lane order inside a tile: the result does not depend on the thread
// count or on scheduling (tests/cpp/test_attention.cpp checks 1 and 2 threads bit for bit). Query
// tiles are handed out one at a time (schedule(dynamic, 1)), which balances the triangular work of
// a causal mask and keeps both cores busy when the OS deschedules a thread on a loaded machine.
//
// Memory: no allocation. The driver owns the token buffers (SweepTokens) and one SweepScratch per
// thread, both sized once.
#pragma once

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../simd/exp.hpp"
#include "../simd/vec.hpp"
#include "evaluators.hpp"

namespace tokenflow::detail {

template <class T>
struct SweepShape {
  static constexpr int kLanes = simd::kLanes<T>;
  static constexpr int kLogitRows = 12;        // queries per logit register block
  static constexpr int kLogitVectors = 2;      // key vectors per logit register block
  static constexpr int kValueRows = 6;         // queries per value register block
  static constexpr int kValueVectors = 4;      // value vectors per value register block
  static constexpr int kQueryTile = 24;        // a multiple of kLogitRows and of kValueRows
  static constexpr int kKeyTile = 128;         // a multiple of kLogitVectors * kLanes
  static constexpr int kSmallValues = 4;       // kv up to this: values fused with the weights
};

// The projected tokens of one head in the kernel's layout. Tokens are in the sweep's order (sorted
// by position under a causal mask). Padding rows and columns are zero.
template <class T>
struct SweepTokens {
  Eigen::Index n = 0;
  int k = 0;                 // query/key dimension
  int kv = 0;                // value dimension (0: no values, only the normalizers)
  const T* q = nullptr;      // queries, padded_queries(n) x k, row-major
  const T* kt = nullptr;     // keys transposed and packed by key tile: tile t is a k x kKeyTile
                             // block at kt + t k kKeyTile (contiguous, so its rows do not collide
                             // in the L1 cache as rows n apart would)
  const T* v = nullptr;      // kv > kSmallValues: values, key_stride(n) x value_stride(kv), row-major
  const T* vt = nullptr;     // 0 < kv <= kSmallValues: values transposed, kv x key_stride(n)
  const T* a = nullptr;      // weights, key_stride(n)
  const Eigen::Index* visible_end = nullptr;  // causal: query i sees keys [0, visible_end[i]), nondecreasing
};

template <class T>
Eigen::Index padded_queries(Eigen::Index n) {
  constexpr int q = SweepShape<T>::kQueryTile;
  return (n + q - 1) / q * q;
}
template <class T>
Eigen::Index key_stride(Eigen::Index n) {
  constexpr int b = SweepShape<T>::kKeyTile;
  return (n + b - 1) / b * b;
}
template <class T>
int value_stride(int kv) {
  constexpr int l = SweepShape<T>::kLanes;
  return kv > SweepShape<T>::kSmallValues ? (kv + l - 1) / l * l : kv;
}

// Per-thread workspace of the kernel.
template <class T>
struct SweepScratch {
  std::vector<T> s;             // kQueryTile x kKeyTile: logits, then weights
  std::vector<T> tile_values;   // kQueryTile x value_stride(kv): one key tile's P V
  std::vector<double> acc;      // kQueryTile x max(kv, 1): the rows' running sums
  std::vector<double> row_max, row_sum;  // kQueryTile

  explicit SweepScratch(int kv = 0) {
    using S = SweepShape<T>;
    s.assign(static_cast<std::size_t>(S::kQueryTile) * S::kKeyTile, T(0));
    tile_values.assign(static_cast<std::size_t>(S::kQueryTile) * std::max(value_stride<T>(kv), 1), T(0));
    acc.assign(static_cast<std::size_t>(S::kQueryTile) * std::max(kv, 1), 0.0);
    row_max.assign(S::kQueryTile, 0.0);
    row_sum.assign(S::kQueryTile, 0.0);
  }
};

// ---- register blocks --------------------------------------------------------------------------

// S (R x cols) = raw logits of queries q (R rows of k, stride ldq) against keys kt (k x ldk, from
// column 0): inner products or squared distances. cols is a multiple of NV lanes.
template <class T, LogitForm form, int R, int NV>
inline void logit_block(const T* q, int ldq, int k, const T* kt, Eigen::Index ldk, int cols, T* s, int lds) {
  using V = simd::Vec<T>;
  constexpr int L = simd::kLanes<T>;
  for (int j = 0; j < cols; j += NV * L) {
    V acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < NV; ++u) acc[r][u] = V{};
    for (int c = 0; c < k; ++c) {
      V key[NV];
      for (int u = 0; u < NV; ++u) key[u] = simd::load(kt + c * ldk + j + u * L);
      for (int r = 0; r < R; ++r) {
        const T qc = q[r * ldq + c];
        for (int u = 0; u < NV; ++u) {
          if constexpr (form == LogitForm::inner_product) {
            acc[r][u] += qc * key[u];
          } else {
            const V diff = qc - key[u];
            acc[r][u] += diff * diff;
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < NV; ++u) simd::store(s + r * lds + j + u * L, acc[r][u]);
  }
}

// out (R x NV lanes) = P (R x cols, stride ldp) times V (cols x NV lanes, stride ldv).
template <class T, int R, int NV>
inline void value_block(const T* p, int ldp, int cols, const T* v, int ldv, T* out, int ldo) {
  using V = simd::Vec<T>;
  constexpr int L = simd::kLanes<T>;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < NV; ++u) acc[r][u] = V{};
  for (int j = 0; j < cols; ++j) {
    V val[NV];
    for (int u = 0; u < NV; ++u) val[u] = simd::load(v + j * ldv + u * L);
    for (int r = 0; r < R; ++r) {
      const T pr = p[r * ldp + j];
      for (int u = 0; u < NV; ++u) acc[r][u] += pr * val[u];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < NV; ++u) simd::store(out + r * ldo + u * L, acc[r][u]);
}

// out (R x kv_stride) = P (R x cols) times V (cols x kv_stride), in chunks of up to 4 vectors.
template <class T, int R>
inline void value_rows(const T* p, int ldp, int cols, const T* v, int kv_stride, T* out) {
  constexpr int L = simd::kLanes<T>;
  int c0 = 0;
  for (; c0 + 4 * L <= kv_stride; c0 += 4 * L) value_block<T, R, 4>(p, ldp, cols, v + c0, kv_stride, out + c0, kv_stride);
  switch ((kv_stride - c0) / L) {
    case 3: value_block<T, R, 3>(p, ldp, cols, v + c0, kv_stride, out + c0, kv_stride); break;
    case 2: value_block<T, R, 2>(p, ldp, cols, v + c0, kv_stride, out + c0, kv_stride); break;
    case 1: value_block<T, R, 1>(p, ldp, cols, v + c0, kv_stride, out + c0, kv_stride); break;
    default: break;
  }
}

// ---- one query tile ---------------------------------------------------------------------------

// KV: the value dimension when it is small (0 .. kSmallValues, fused with the weights), or -1
// (large: value register blocks).
template <class T, class Ev, int KV, class Finish>
void sweep_query_tile(const Ev& ev, const SweepTokens<T>& tok, Eigen::Index i0, SweepScratch<T>& sc,
                      const Finish& finish) {
  using S = SweepShape<T>;
  constexpr int BQ = S::kQueryTile, BK = S::kKeyTile;
  constexpr int block_cols = S::kLogitVectors * S::kLanes;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const Eigen::Index n = tok.n, ldk = key_stride<T>(n);
  const int rows = static_cast<int>(std::min<Eigen::Index>(BQ, n - i0));
  const int kv = tok.kv, acc_stride = std::max(kv, 1);
  const int kv_stride = value_stride<T>(kv);
  auto visible_end = [&](int r) { return tok.visible_end ? tok.visible_end[i0 + r] : n; };
  const Eigen::Index keys_end = visible_end(rows - 1);  // the largest: visible_end is nondecreasing

  T* s = sc.s.data();
  double* acc = sc.acc.data();
  std::fill(sc.acc.begin(), sc.acc.end(), 0.0);
  std::fill(sc.row_max.begin(), sc.row_max.end(), kNegInf);
  std::fill(sc.row_sum.begin(), sc.row_sum.end(), 0.0);
  const int logit_rows = (rows + S::kLogitRows - 1) / S::kLogitRows * S::kLogitRows;
  const int value_rows_count = (rows + S::kValueRows - 1) / S::kValueRows * S::kValueRows;

  for (Eigen::Index j0 = 0; j0 < keys_end; j0 += BK) {
    const int tile_keys = static_cast<int>(std::min<Eigen::Index>(BK, keys_end - j0));
    const int cols = (tile_keys + block_cols - 1) / block_cols * block_cols;
    // 1. raw logits for the tile
    for (int r0 = 0; r0 < logit_rows; r0 += S::kLogitRows)
      logit_block<T, Ev::form, S::kLogitRows, S::kLogitVectors>(tok.q + (i0 + r0) * tok.k, tok.k, tok.k,
                                                                 tok.kt + (j0 / BK) * tok.k * BK, BK, cols,
                                                                 s + r0 * BK, BK);
    // 2. weights (and 3. small values), row by row
    for (int r = 0; r < rows; ++r) {
      const Eigen::Index i = i0 + r;
      const int limit = static_cast<int>(std::clamp<Eigen::Index>(visible_end(r) - j0, 0, tile_keys));
      T* srow = s + r * BK;
      const T* a = tok.a + j0;
      double* acc_row = acc + r * acc_stride;
      T tile_sum = 0;
      [[maybe_unused]] T vsum0 = 0, vsum1 = 0, vsum2 = 0, vsum3 = 0;
      [[maybe_unused]] const T* vt = KV > 0 ? tok.vt + j0 : nullptr;
      if constexpr (Ev::normalized) {
        if (limit == 0) {
          if constexpr (KV < 0) std::fill(srow, srow + cols, T(0));
          continue;
        }
        T tile_max = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : tile_max)
        for (int jj = 0; jj < limit; ++jj) tile_max = std::max(tile_max, ev.logit(srow[jj]));
        if (static_cast<double>(tile_max) > sc.row_max[r]) {
          const double shrink = std::exp(sc.row_max[r] - static_cast<double>(tile_max));
          sc.row_sum[r] *= shrink;
          for (int c = 0; c < kv; ++c) acc_row[c] *= shrink;
          sc.row_max[r] = static_cast<double>(tile_max);
        }
        const T m = static_cast<T>(sc.row_max[r]);
        if constexpr (KV < 0) {
#pragma omp simd reduction(+ : tile_sum)
          for (int jj = 0; jj < limit; ++jj) {
            const T p = a[jj] * simd::exp_poly(ev.logit(srow[jj]) - m);
            srow[jj] = p;
            tile_sum += p;
          }
        } else {
#pragma omp simd reduction(+ : tile_sum, vsum0, vsum1, vsum2, vsum3)
          for (int jj = 0; jj < limit; ++jj) {
            const T p = a[jj] * simd::exp_poly(ev.logit(srow[jj]) - m);
            tile_sum += p;
            if constexpr (KV > 0) vsum0 += p * vt[jj];
            if constexpr (KV > 1) vsum1 += p * vt[ldk + jj];
            if constexpr (KV > 2) vsum2 += p * vt[2 * ldk + jj];
            if constexpr (KV > 3) vsum3 += p * vt[3 * ldk + jj];
          }
        }
        sc.row_sum[r] += static_cast<double>(tile_sum);
      } else {
        if constexpr (KV < 0) {
#pragma omp simd
          for (int jj = 0; jj < limit; ++jj) srow[jj] = a[jj] * ev.weight(ev.logit(srow[jj]), i, j0 + jj);
        } else {
#pragma omp simd reduction(+ : vsum0, vsum1, vsum2, vsum3)
          for (int jj = 0; jj < limit; ++jj) {
            const T p = a[jj] * ev.weight(ev.logit(srow[jj]), i, j0 + jj);
            if constexpr (KV > 0) vsum0 += p * vt[jj];
            if constexpr (KV > 1) vsum1 += p * vt[ldk + jj];
            if constexpr (KV > 2) vsum2 += p * vt[2 * ldk + jj];
            if constexpr (KV > 3) vsum3 += p * vt[3 * ldk + jj];
          }
        }
      }
      if constexpr (KV < 0) {
        std::fill(srow + limit, srow + cols, T(0));
      } else {
        if constexpr (KV > 0) acc_row[0] += static_cast<double>(vsum0);
        if constexpr (KV > 1) acc_row[1] += static_cast<double>(vsum1);
        if constexpr (KV > 2) acc_row[2] += static_cast<double>(vsum2);
        if constexpr (KV > 3) acc_row[3] += static_cast<double>(vsum3);
      }
    }
    // 3. large values: the tile's P V in register blocks, added to the rows' sums
    if constexpr (KV < 0) {
      T* tv = sc.tile_values.data();
      for (int r0 = 0; r0 < value_rows_count; r0 += S::kValueRows)
        value_rows<T, S::kValueRows>(s + r0 * BK, BK, cols, tok.v + j0 * kv_stride, kv_stride, tv + r0 * kv_stride);
      for (int r = 0; r < rows; ++r) {
        if (tok.visible_end && visible_end(r) <= j0) continue;
        for (int c = 0; c < kv; ++c) acc[r * acc_stride + c] += static_cast<double>(tv[r * kv_stride + c]);
      }
    }
  }
  // The tile's results: y in acc (normalized in place), log-partitions in row_max.
  for (int r = 0; r < rows; ++r) {
    double* y = acc + r * acc_stride;
    if constexpr (Ev::normalized) {
      const double norm = 1.0 / sc.row_sum[r];
      for (int c = 0; c < kv; ++c) y[c] *= norm;
      sc.row_max[r] += std::log(sc.row_sum[r]);
    } else {
      sc.row_max[r] = 0.0;
    }
  }
  finish(i0, rows, static_cast<const double*>(acc), acc_stride, static_cast<const double*>(sc.row_max.data()));
}

template <class T, class Ev, int KV, class Finish>
void sweep_all(const Ev& ev, const SweepTokens<T>& tok, std::vector<SweepScratch<T>>& scratch, const Finish& finish) {
  constexpr int BQ = SweepShape<T>::kQueryTile;
  const Eigen::Index tiles = (tok.n + BQ - 1) / BQ;
  // Any thread may take any tile (dynamic: a thread that the OS descheduled on a busy machine does
  // not hold the others up); a row's result does not depend on which thread computes it.
#pragma omp parallel num_threads(static_cast<int>(scratch.size()))
  {
    SweepScratch<T>& sc = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
    for (Eigen::Index t = 0; t < tiles; ++t) sweep_query_tile<T, Ev, KV>(ev, tok, t * BQ, sc, finish);
  }
}

// For every query i (in the tokens' order), over the keys j visible to i, the kernel forms
//   normalized kinds:   y_i = sum_j w_ij v_j,  w_ij = a_j exp(s_ij) / sum_j' a_j' exp(s_ij'),
//                       log_partition_i = log sum_j a_j exp(s_ij)
//   unnormalized kinds: y_i = sum_j a_j weight(s_ij, i, j) v_j  (log_partition_i = 0)
// and calls finish(i0, rows, y, y_stride, log_partition) once per query tile, from the thread
// that owns the tile (so finish may write to its queries' state without locks): queries
// i0 .. i0 + rows - 1, y row r at y + r y_stride (kv doubles; the buffer holds kQueryTile rows, the
// ones past `rows` are zero), log_partition[r]. scratch: one per thread (its size is the number of
// threads), built for tok.kv.
template <class T, class Ev, class Finish>
void sweep(const Ev& ev, const SweepTokens<T>& tok, std::vector<SweepScratch<T>>& scratch, const Finish& finish) {
  static_assert(SweepShape<T>::kSmallValues == 4, "the cases below cover kv = 0 .. kSmallValues");
  switch (tok.kv) {
    case 0: sweep_all<T, Ev, 0>(ev, tok, scratch, finish); break;
    case 1: sweep_all<T, Ev, 1>(ev, tok, scratch, finish); break;
    case 2: sweep_all<T, Ev, 2>(ev, tok, scratch, finish); break;
    case 3: sweep_all<T, Ev, 3>(ev, tok, scratch, finish); break;
    case 4: sweep_all<T, Ev, 4>(ev, tok, scratch, finish); break;
    default: sweep_all<T, Ev, -1>(ev, tok, scratch, finish); break;
  }
}

}  // namespace tokenflow::detail
