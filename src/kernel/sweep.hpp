// The tiled sweep: tiles of queries against tiles of keys, with online (running-maximum)
// normalization, so that no n x m matrix exists. Written once against an evaluator (logits.hpp: a
// logit form, and a log-weight or a weight) and shared by the parts above it: attention (every kind,
// both precisions, the velocity and the interaction energy; src/attention/evaluators.hpp) and the
// online soft-min of optimal transport (src/ot/softmin.cpp). It knows neither of them.
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
//      otherwise P (rows x keys) times V (keys x kv) in register blocks of kValueRows x (up to) 4
//      vectors.
// Partial sums of a tile are formed in T and added to double accumulators, so a float32 row sum
// carries the rounding of at most kKeyTile terms in float and of n / kKeyTile terms in double.
//
// Causal masks: the tokens are sorted by position (the driver does it once); query i then sees the
// keys [0, visible_end[i]), a prefix, so a query tile stops at the last key its last row sees and
// only the tiles on the diagonal are partially masked.
//
// Symmetric logits (K = Q, no mask; the driver decides, see src/attention/field.cpp):
// sweep_symmetric computes the logits of each pair of query blocks once and feeds them to both
// blocks, which halves the logit products (a quarter of the work at large k). Its pairs of blocks
// run in a fixed order with a counter per block, so it is as deterministic as the tile loop.
//
// Determinism: each query row is handled by one thread, and its sums run over key tiles in
// increasing order with a fixed lane order inside a tile: the result does not depend on the thread
// count or on scheduling (tests/cpp/test_attention.cpp checks 1 and 2 threads bit for bit). Query
// tiles are handed out one at a time (schedule(dynamic, 1)), which balances the triangular work of
// a causal mask and keeps both cores busy when the OS deschedules a thread on a loaded machine.
//
// Memory: no allocation. The driver owns the token buffers (SweepTokens), one SweepScratch per
// thread and the running sums of the symmetric kernel (SweepRows), all sized once.
#pragma once

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "../simd/exp.hpp"
#include "../simd/vec.hpp"
#include "logits.hpp"

namespace tokenflow::detail {

template <class T>
struct SweepShape {
  static constexpr int kLanes = simd::kLanes<T>;
  // Register blocks sized to the register file (a vector is one register, simd/vec.hpp): with
  // AVX-512 (32 registers) 12 x 2 logit accumulators, with AVX2 (16 registers) 6 x 2, which leave
  // room for the two key vectors and the broadcast query (12 x 2 would spill to the stack in the
  // inner loop). Measured on an AMD EPYC (Zen 3, AVX2), one thread, n = 1024: 4 logit rows against
  // 6, f32 d = 64 8.2 -> 6.3 ms a step, f64 d = 2 3.8 -> 3.3 ms. The rows of a block are
  // independent: the block size changes no result.
#ifdef __AVX512F__
  static constexpr int kLogitRows = 12;        // queries per logit register block
  static constexpr int kValueRows = 6;         // queries per value register block
#else
  static constexpr int kLogitRows = 6;
  static constexpr int kValueRows = 3;
#endif
  static constexpr int kLogitVectors = 2;      // key vectors per logit register block
  static constexpr int kQueryTile = 24;        // a multiple of kLogitRows and of kValueRows
  static constexpr int kKeyTile = 128;         // a multiple of kLogitVectors * kLanes
  static constexpr int kSmallValues = 4;       // kv up to this: values fused with the weights
};

// The projected tokens of one head in the kernel's layout. Tokens are in the sweep's order (sorted
// by position under a causal mask). Padding rows and columns are zero.
template <class T>
struct SweepTokens {
  Eigen::Index n = 0;        // queries (and keys, unless `keys` says otherwise)
  Eigen::Index keys = -1;    // keys, when they are other points than the queries (-1: n); not with
                             // `symmetric` (the OT soft-min of src/ot/softmin.cpp: n x-points
                             // against m y-points)
  int k = 0;                 // query/key dimension
  int kv = 0;                // value dimension (0: no values, only the normalizers)
  const T* q = nullptr;      // queries, padded_queries(n) x k, row-major
  const T* kt = nullptr;     // keys transposed and packed by key tile: tile t is a k x kKeyTile
                             // block at kt + t k kKeyTile (contiguous, so its rows do not collide
                             // in the L1 cache as rows n apart would); packed_key(k, j, c) below
  // (with K = key_count(): the keys)
  const T* v = nullptr;      // kv > kSmallValues: values, key_stride(K) x value_stride(kv), row-major
  const T* vt = nullptr;     // 0 < kv <= kSmallValues: values transposed, kv x key_stride(K)
  const T* a = nullptr;      // weights, key_stride(K)
  const Eigen::Index* visible_end = nullptr;  // causal: query i sees keys [0, visible_end[i]), nondecreasing
  // The logit of (i, j) equals that of (j, i) up to rounding (Q = K, no mask): the kernel computes
  // each pair once (sweep_symmetric) and uses it for both queries.
  bool symmetric = false;
  // The query tiles computed: sweep positions [query_begin, query_end) (query_end < 0: n), with
  // query_begin a multiple of kQueryTile, so that every tile holds the rows it holds in a sweep of
  // all queries (the MPI driver gives each rank such a block; not with `symmetric`).
  Eigen::Index query_begin = 0, query_end = -1;
};

template <class T>
Eigen::Index key_count(const SweepTokens<T>& tok) {
  return tok.keys < 0 ? tok.n : tok.keys;
}

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
// The offset in SweepTokens::kt of coordinate c of key j (k coordinates per key).
template <class T>
Eigen::Index packed_key(int k, Eigen::Index j, int c) {
  constexpr Eigen::Index b = SweepShape<T>::kKeyTile;
  return (j / b) * k * b + c * b + j % b;
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
  // (kSymmetricKeys + kQueryTile) x kSymmetricBlock: S^T, sized by the symmetric kernel when it
  // first runs (135 KB in float64: allocated for every sweep, it cost the small solves of online
  // Sinkhorn, two sweeps an iteration, a fresh mmap and its page faults per sweep).
  std::vector<T> transposed;

  explicit SweepScratch(int kv = 0) {
    using S = SweepShape<T>;
    s.assign(static_cast<std::size_t>(S::kQueryTile) * S::kKeyTile, T(0));
    tile_values.assign(static_cast<std::size_t>(S::kQueryTile) * std::max(value_stride<T>(kv), 1), T(0));
    acc.assign(static_cast<std::size_t>(S::kQueryTile) * std::max(kv, 1), 0.0);
    row_max.assign(S::kQueryTile, 0.0);
    row_sum.assign(S::kQueryTile, 0.0);
  }
  static constexpr int symmetric_block = 192, symmetric_keys = 64;  // see SymmetricShape
};

// The running sums of every query and the progress counters of the symmetric kernel, sized for
// n queries: padded_queries(n) rows (zero beyond n), one counter per block of queries.
struct SweepRows {
  std::vector<double> max, sum, acc;
  int acc_stride = 1;
  std::unique_ptr<std::atomic<long>[]> done;  // per block: pairs of blocks finished so far
  std::atomic<long> next{0};                  // the next pair of blocks to hand out
  template <class T>
  static SweepRows make(Eigen::Index n, int kv) {
    return SweepRows(padded_queries<T>(n), kv, (n + SweepScratch<T>::symmetric_block - 1) / SweepScratch<T>::symmetric_block);
  }
  SweepRows(Eigen::Index padded_n, int kv, Eigen::Index blocks)
      : max(static_cast<std::size_t>(padded_n), 0.0),
        sum(static_cast<std::size_t>(padded_n), 0.0),
        acc(static_cast<std::size_t>(padded_n * std::max(kv, 1)), 0.0),
        acc_stride(std::max(kv, 1)),
        done(new std::atomic<long>[static_cast<std::size_t>(std::max<Eigen::Index>(blocks, 1))]) {}
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

// ---- the running sums of a set of queries ------------------------------------------------------

// Per query r (from a base index): the running maximum and sum of the normalized kinds, and the
// running sum of p v (acc_stride doubles).
struct RowState {
  double* max;
  double* sum;
  double* acc;
  int acc_stride;
  RowState offset(Eigen::Index r) const { return {max + r, sum + r, acc + r * acc_stride, acc_stride}; }
};

// Adds the keys [j0, j0 + cols) to the running sums of `rows` queries i0, i0 + 1, ...: s holds
// their raw logits (rows x cols, stride lds; overwritten with the weights), limit(r) how many of
// the keys query r sees (a prefix of the cols). KV: the value dimension when it is small
// (0 .. kSmallValues, fused with the weights), or -1 (large: value register blocks). The buffer s
// must hold whole value blocks of rows (rows rounded up to kValueRows).
template <class T, class Ev, int KV, class Limit>
void update_rows(const Ev& ev, const SweepTokens<T>& tok, T* s, int lds, int rows, Eigen::Index i0,
                 Eigen::Index j0, int cols, const Limit& limit, const RowState& st, SweepScratch<T>& sc) {
  using S = SweepShape<T>;
  const Eigen::Index ldk = key_stride<T>(key_count(tok));
  const int kv = tok.kv, kv_stride = value_stride<T>(kv);
  for (int r = 0; r < rows; ++r) {
    const Eigen::Index i = i0 + r;
    const int lim = limit(r);
    T* srow = s + r * lds;
    const T* a = tok.a + j0;
    double* acc_row = st.acc + r * st.acc_stride;
    T tile_sum = 0;
    [[maybe_unused]] T vsum0 = 0, vsum1 = 0, vsum2 = 0, vsum3 = 0;
    [[maybe_unused]] const T* vt = KV > 0 ? tok.vt + j0 : nullptr;
    if constexpr (Ev::normalized) {
      if (lim == 0) {
        if constexpr (KV < 0) std::fill(srow, srow + cols, T(0));
        continue;
      }
      T tile_max = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : tile_max)
      for (int jj = 0; jj < lim; ++jj) tile_max = std::max(tile_max, ev.logit(srow[jj]));
      if (static_cast<double>(tile_max) > st.max[r]) {
        const double shrink = std::exp(st.max[r] - static_cast<double>(tile_max));
        st.sum[r] *= shrink;
        for (int c = 0; c < kv; ++c) acc_row[c] *= shrink;
        st.max[r] = static_cast<double>(tile_max);
      }
      const T m = static_cast<T>(st.max[r]);
      if constexpr (KV < 0) {
#pragma omp simd reduction(+ : tile_sum)
        for (int jj = 0; jj < lim; ++jj) {
          const T p = a[jj] * simd::exp_poly(ev.logit(srow[jj]) - m);
          srow[jj] = p;
          tile_sum += p;
        }
      } else {
#pragma omp simd reduction(+ : tile_sum, vsum0, vsum1, vsum2, vsum3)
        for (int jj = 0; jj < lim; ++jj) {
          const T p = a[jj] * simd::exp_poly(ev.logit(srow[jj]) - m);
          tile_sum += p;
          if constexpr (KV > 0) vsum0 += p * vt[jj];
          if constexpr (KV > 1) vsum1 += p * vt[ldk + jj];
          if constexpr (KV > 2) vsum2 += p * vt[2 * ldk + jj];
          if constexpr (KV > 3) vsum3 += p * vt[3 * ldk + jj];
        }
      }
      st.sum[r] += static_cast<double>(tile_sum);
    } else {
      if constexpr (KV < 0) {
#pragma omp simd
        for (int jj = 0; jj < lim; ++jj) srow[jj] = a[jj] * ev.weight(ev.logit(srow[jj]), i, j0 + jj);
      } else {
#pragma omp simd reduction(+ : vsum0, vsum1, vsum2, vsum3)
        for (int jj = 0; jj < lim; ++jj) {
          const T p = a[jj] * ev.weight(ev.logit(srow[jj]), i, j0 + jj);
          if constexpr (KV > 0) vsum0 += p * vt[jj];
          if constexpr (KV > 1) vsum1 += p * vt[ldk + jj];
          if constexpr (KV > 2) vsum2 += p * vt[2 * ldk + jj];
          if constexpr (KV > 3) vsum3 += p * vt[3 * ldk + jj];
        }
      }
    }
    if constexpr (KV < 0) {
      std::fill(srow + lim, srow + cols, T(0));
    } else {
      if constexpr (KV > 0) acc_row[0] += static_cast<double>(vsum0);
      if constexpr (KV > 1) acc_row[1] += static_cast<double>(vsum1);
      if constexpr (KV > 2) acc_row[2] += static_cast<double>(vsum2);
      if constexpr (KV > 3) acc_row[3] += static_cast<double>(vsum3);
    }
  }
  // Large values: the tile's P V in register blocks, added to the rows' sums.
  if constexpr (KV < 0) {
    T* tv = sc.tile_values.data();
    const int value_rows_count = (rows + S::kValueRows - 1) / S::kValueRows * S::kValueRows;
    for (int r0 = 0; r0 < value_rows_count; r0 += S::kValueRows)
      value_rows<T, S::kValueRows>(s + r0 * lds, lds, cols, tok.v + j0 * kv_stride, kv_stride, tv + r0 * kv_stride);
    for (int r = 0; r < rows; ++r) {
      if (limit(r) == 0) continue;
      double* __restrict acc_row = st.acc + r * st.acc_stride;
      const T* __restrict tv_row = tv + r * kv_stride;
#pragma omp simd
      for (int c = 0; c < kv; ++c) acc_row[c] += static_cast<double>(tv_row[c]);
    }
  }
}

// The results of `rows` queries from their running sums: y in acc (normalized in place),
// log-partitions in max.
template <class Ev>
void finish_rows(int rows, int kv, const RowState& st) {
  for (int r = 0; r < rows; ++r) {
    if constexpr (Ev::normalized) {
      const double norm = 1.0 / st.sum[r];
      for (int c = 0; c < kv; ++c) st.acc[r * st.acc_stride + c] *= norm;
      st.max[r] += std::log(st.sum[r]);
    } else {
      st.max[r] = 0.0;
    }
  }
}

// ---- one query tile against every visible key --------------------------------------------------

template <class T, class Ev, int KV, class Finish>
void sweep_query_tile(const Ev& ev, const SweepTokens<T>& tok, Eigen::Index i0, SweepScratch<T>& sc,
                      const Finish& finish) {
  using S = SweepShape<T>;
  constexpr int BQ = S::kQueryTile, BK = S::kKeyTile;
  constexpr int block_cols = S::kLogitVectors * S::kLanes;
  const Eigen::Index n = tok.n;
  const int rows = static_cast<int>(std::min<Eigen::Index>(BQ, n - i0));
  const Eigen::Index keys = key_count(tok);
  auto visible_end = [&](int r) { return tok.visible_end ? tok.visible_end[i0 + r] : keys; };
  const Eigen::Index keys_end = visible_end(rows - 1);  // the largest: visible_end is nondecreasing

  std::fill(sc.acc.begin(), sc.acc.end(), 0.0);
  std::fill(sc.row_max.begin(), sc.row_max.end(), -std::numeric_limits<double>::infinity());
  std::fill(sc.row_sum.begin(), sc.row_sum.end(), 0.0);
  const RowState st{sc.row_max.data(), sc.row_sum.data(), sc.acc.data(), std::max(tok.kv, 1)};
  const int logit_rows = (rows + S::kLogitRows - 1) / S::kLogitRows * S::kLogitRows;
  T* s = sc.s.data();
  for (Eigen::Index j0 = 0; j0 < keys_end; j0 += BK) {
    const int tile_keys = static_cast<int>(std::min<Eigen::Index>(BK, keys_end - j0));
    const int cols = (tile_keys + block_cols - 1) / block_cols * block_cols;
    for (int r0 = 0; r0 < logit_rows; r0 += S::kLogitRows)
      logit_block<T, Ev::form, S::kLogitRows, S::kLogitVectors>(tok.q + (i0 + r0) * tok.k, tok.k, tok.k,
                                                                 tok.kt + (j0 / BK) * tok.k * BK, BK, cols,
                                                                 s + r0 * BK, BK);
    auto limit = [&](int r) { return static_cast<int>(std::clamp<Eigen::Index>(visible_end(r) - j0, 0, tile_keys)); };
    update_rows<T, Ev, KV>(ev, tok, s, BK, rows, i0, j0, tile_keys, limit, st, sc);
  }
  finish_rows<Ev>(rows, tok.kv, st);
  finish(i0, rows, static_cast<const double*>(st.acc), st.acc_stride, static_cast<const double*>(st.max));
}

// ---- symmetric logits: each pair once ----------------------------------------------------------

// Blocks of kSymmetricBlock queries; the pair of blocks (I, J) computes S_IJ once, in tiles of
// kQueryTile queries of I by kSymmetricKeys keys of J, and feeds it to the queries of I (against the
// keys of J) and, transposed, to the queries of J (against all the keys of I at once).
template <class T>
struct SymmetricShape {
  static constexpr int kSymmetricBlock = SweepScratch<T>::symmetric_block;  // a multiple of kQueryTile and kSymmetricKeys
  static constexpr int kSymmetricKeys = SweepScratch<T>::symmetric_keys;    // a multiple of kLogitVectors lanes; divides kKeyTile
};

// The pair of blocks (I, J), I != J, or the diagonal block (I, I) (then only S_II for I).
template <class T, class Ev, int KV>
void sweep_block_pair(const Ev& ev, const SweepTokens<T>& tok, Eigen::Index I, Eigen::Index J, const RowState& st,
                      SweepScratch<T>& sc) {
  using S = SweepShape<T>;
  constexpr int BQ = S::kQueryTile, BK = S::kKeyTile, BS = SymmetricShape<T>::kSymmetricBlock,
                KS = SymmetricShape<T>::kSymmetricKeys;
  constexpr int block_cols = S::kLogitVectors * S::kLanes;
  static_assert(BS % BQ == 0 && BS % KS == 0 && BK % KS == 0 && KS % block_cols == 0);
  const Eigen::Index n = tok.n, iI = I * BS, jJ = J * BS;
  const int nI = static_cast<int>(std::min<Eigen::Index>(BS, n - iI));
  const int nJ = static_cast<int>(std::min<Eigen::Index>(BS, n - jJ));
  T* s = sc.s.data();
  if (sc.transposed.empty()) sc.transposed.assign(static_cast<std::size_t>(KS + BQ) * BS, T(0));
  T* tr = sc.transposed.data();  // (KS + BQ) x BS: S_IJ^T for the current keys of J
  for (int js = 0; js < nJ; js += KS) {
    const Eigen::Index j0 = jJ + js;
    const int kc = std::min(KS, nJ - js);
    const int cols = (kc + block_cols - 1) / block_cols * block_cols;
    const T* keys = tok.kt + (j0 / BK) * tok.k * BK + j0 % BK;
    for (int is = 0; is < nI; is += BQ) {
      const Eigen::Index i0 = iI + is;
      const int rc = std::min(BQ, nI - is);
      const int logit_rows = (rc + S::kLogitRows - 1) / S::kLogitRows * S::kLogitRows;
      for (int r0 = 0; r0 < logit_rows; r0 += S::kLogitRows)
        logit_block<T, Ev::form, S::kLogitRows, S::kLogitVectors>(tok.q + (i0 + r0) * tok.k, tok.k, tok.k, keys, BK,
                                                                   cols, s + r0 * BK, BK);
      if (I != J)
        for (int r = 0; r < rc; ++r)
          for (int jj = 0; jj < kc; ++jj) tr[jj * BS + is + r] = s[r * BK + jj];
      update_rows<T, Ev, KV>(ev, tok, s, BK, rc, i0, j0, kc, [kc](int) { return kc; }, st.offset(i0), sc);
    }
    if (I == J) continue;
    for (int r0 = 0; r0 < kc; r0 += BQ) {
      const int rows = std::min(BQ, kc - r0);
      update_rows<T, Ev, KV>(ev, tok, tr + r0 * BS, BS, rows, j0 + r0, iI, nI, [nI](int) { return nI; },
                             st.offset(j0 + r0), sc);
    }
  }
}

// Every pair of blocks once, in a fixed global order: first the diagonal blocks, then the rounds
// of the circle method (round-robin tournament; an odd count of blocks gives each block one bye).
// Threads take the pairs in that order and start one only when every earlier pair that shares a
// block with it has finished (a counter per block), so each query's sums run in the global order
// whatever the thread count and timing, without a barrier between rounds (the pairs of a round are
// disjoint, so waits are rare and short; a waiting thread yields its core).
template <class T, class Ev, int KV, class Finish>
void sweep_symmetric(const Ev& ev, const SweepTokens<T>& tok, std::vector<SweepScratch<T>>& scratch,
                     SweepRows& rows, const Finish& finish) {
  constexpr int BQ = SweepShape<T>::kQueryTile, BS = SymmetricShape<T>::kSymmetricBlock;
  const Eigen::Index n = tok.n, blocks = (n + BS - 1) / BS;
  const Eigen::Index players = blocks + (blocks % 2);  // with a dummy block when the count is odd
  const Eigen::Index per_round = players / 2, total = blocks + (players - 1) * per_round;
  const Eigen::Index tiles = (n + BQ - 1) / BQ;
  const RowState st{rows.max.data(), rows.sum.data(), rows.acc.data(), rows.acc_stride};
  for (Eigen::Index b = 0; b < blocks; ++b) rows.done[b].store(0, std::memory_order_relaxed);
  rows.next.store(0, std::memory_order_relaxed);
  // How many pairs block b has finished before its pair of round r (diagonal: 1; the bye of block b
  // is in round b).
  auto sequence = [&](Eigen::Index b, Eigen::Index round) {
    return 1 + round - ((blocks % 2 == 1 && b < round) ? 1 : 0);
  };
  auto wait_for = [&](Eigen::Index b, long count) {
    for (int spin = 0; rows.done[b].load(std::memory_order_acquire) != count; ++spin)
      if (spin > 64) std::this_thread::yield();
  };
#pragma omp parallel num_threads(static_cast<int>(scratch.size()))
  {
    SweepScratch<T>& sc = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (Eigen::Index i = 0; i < n; ++i) {
      st.max[i] = -std::numeric_limits<double>::infinity();
      st.sum[i] = 0.0;
      std::fill(st.acc + i * st.acc_stride, st.acc + (i + 1) * st.acc_stride, 0.0);
    }
    for (;;) {
      const long p = rows.next.fetch_add(1, std::memory_order_relaxed);
      if (p >= total) break;
      if (p < blocks) {  // diagonal: the block's first pair
        sweep_block_pair<T, Ev, KV>(ev, tok, p, p, st, sc);
        rows.done[p].store(1, std::memory_order_release);
        continue;
      }
      const Eigen::Index round = (p - blocks) / per_round, k = (p - blocks) % per_round;
      const Eigen::Index a = k == 0 ? players - 1 : (round + k) % (players - 1);
      const Eigen::Index b = k == 0 ? round : (round - k + players - 1) % (players - 1);
      if (a >= blocks || b >= blocks) continue;  // the bye
      const Eigen::Index I = std::min(a, b), J = std::max(a, b);
      const long seq_i = sequence(I, round), seq_j = sequence(J, round);
      wait_for(I, seq_i);
      wait_for(J, seq_j);
      sweep_block_pair<T, Ev, KV>(ev, tok, I, J, st, sc);
      rows.done[I].store(seq_i + 1, std::memory_order_release);
      rows.done[J].store(seq_j + 1, std::memory_order_release);
    }
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
    for (Eigen::Index t = 0; t < tiles; ++t) {
      const Eigen::Index i0 = t * BQ;
      const int count = static_cast<int>(std::min<Eigen::Index>(BQ, n - i0));
      const RowState tile = st.offset(i0);
      finish_rows<Ev>(count, tok.kv, tile);
      finish(i0, count, static_cast<const double*>(tile.acc), tile.acc_stride, static_cast<const double*>(tile.max));
    }
  }
}

template <class T, class Ev, int KV, class Finish>
void sweep_all(const Ev& ev, const SweepTokens<T>& tok, std::vector<SweepScratch<T>>& scratch, SweepRows* rows,
               const Finish& finish) {
  if (tok.symmetric) {
    sweep_symmetric<T, Ev, KV>(ev, tok, scratch, *rows, finish);
    return;
  }
  constexpr int BQ = SweepShape<T>::kQueryTile;
  const Eigen::Index query_end = tok.query_end < 0 ? tok.n : std::min(tok.query_end, tok.n);
  const Eigen::Index first_tile = tok.query_begin / BQ, tiles = (query_end + BQ - 1) / BQ;
  // Any thread may take any tile (dynamic: a thread that the OS descheduled on a busy machine does
  // not hold the others up); a row's result does not depend on which thread computes it.
#pragma omp parallel num_threads(static_cast<int>(scratch.size()))
  {
    SweepScratch<T>& sc = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
    for (Eigen::Index t = first_tile; t < tiles; ++t) sweep_query_tile<T, Ev, KV>(ev, tok, t * BQ, sc, finish);
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
// threads), built for tok.kv. rows: the running sums of all queries, used when tok.symmetric
// (padded_queries(n) rows, built for tok.kv); may be null otherwise.
template <class T, class Ev, class Finish>
void sweep(const Ev& ev, const SweepTokens<T>& tok, std::vector<SweepScratch<T>>& scratch, SweepRows* rows,
           const Finish& finish) {
  static_assert(SweepShape<T>::kSmallValues == 4, "the cases below cover kv = 0 .. kSmallValues");
  switch (tok.kv) {
    case 0: sweep_all<T, Ev, 0>(ev, tok, scratch, rows, finish); break;
    case 1: sweep_all<T, Ev, 1>(ev, tok, scratch, rows, finish); break;
    case 2: sweep_all<T, Ev, 2>(ev, tok, scratch, rows, finish); break;
    case 3: sweep_all<T, Ev, 3>(ev, tok, scratch, rows, finish); break;
    case 4: sweep_all<T, Ev, 4>(ev, tok, scratch, rows, finish); break;
    default: sweep_all<T, Ev, -1>(ev, tok, scratch, rows, finish); break;
  }
}

}  // namespace tokenflow::detail
