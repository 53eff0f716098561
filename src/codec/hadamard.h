// codec/hadamard.h — the orthonormal fast Walsh–Hadamard transform of int4h.
//
// Bit-identical results across implementations need one fixed order of float
// operations: stages with butterfly span 1, 2, 4, …, n/2, each butterfly
// (a, b) → (a + b, a − b), then every element multiplied by
// numeric::hadamard_norm(n). Within a stage the butterflies are independent, so
// a vectorised version may compute them in any order.
#pragma once

#include "codec/numeric.h"

namespace hiq::codec_detail {

// In place; n must be a power of two. The transform is its own inverse.
inline void hadamard_transform(float* v, int n) {
  for (int span = 1; span < n; span <<= 1) {
    for (int i = 0; i < n; i += 2 * span) {
      for (int j = i; j < i + span; ++j) {
        const float a = v[j], b = v[j + span];
        v[j] = a + b;
        v[j + span] = a - b;
      }
    }
  }
  const float norm = numeric::hadamard_norm(n);
  for (int i = 0; i < n; ++i) v[i] *= norm;
}

}  // namespace hiq::codec_detail
