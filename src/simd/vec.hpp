// simd/vec.hpp: a 64-byte vector of float (16 lanes) or double (8 lanes) through GCC's vector
// extensions, for the register-blocked kernels. The compiler maps it to one AVX-512 register, or to
// two AVX2 / four SSE registers on narrower machines: the kernels are written once for all ISAs.
// Loads and stores are unaligned (memcpy), so buffers need no particular alignment.
#pragma once

#include <cstring>

namespace tokenflow::simd {

typedef float VecF32 __attribute__((vector_size(64)));
typedef double VecF64 __attribute__((vector_size(64)));

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
inline constexpr int kLanes = static_cast<int>(64 / sizeof(T));

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
