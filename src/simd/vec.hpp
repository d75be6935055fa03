// simd/vec.hpp: a 64-byte vector of float (16 lanes) or double (8 lanes) through GCC's vector
// extensions, for the register-blocked kernels. The compiler maps it to one AVX-512 register, or to
// two AVX2 / four SSE registers on narrower machines: the kernels are written once for all ISAs.
// Loads and stores are unaligned (memcpy), so buffers need no particular alignment.
#pragma once

#include <cstring>

namespace tokenflow::simd {

// The width is the machine's register: GCC keeps a 64-byte vector on an AVX2 machine as two halves
// whose arrays (the accumulators of the register blocks) it spills to the stack, which made the
// attention kernel's value and logit blocks at d = 64 about 20x slower than at register width
// (measured on an AMD EPYC, Zen 3: 5.7 GFLOP/s for f32 at n = 4096).
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
inline constexpr int kVectorBytes = 32;
#else
inline constexpr int kVectorBytes = 16;
#endif
typedef float VecF32 __attribute__((vector_size(kVectorBytes)));
typedef double VecF64 __attribute__((vector_size(kVectorBytes)));

template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  using type = VecF32;
};
template <>
struct VecOf<double> {
  using type = VecF64;
};

template <class T>
using Vec = typename VecOf<T>::type;
template <class T>
inline constexpr int kLanes = static_cast<int>(kVectorBytes / sizeof(T));

template <class T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store(T* p, const Vec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
inline Vec<T> broadcast(T x) {
  return Vec<T>{} + x;
}

}  // namespace tokenflow::simd
