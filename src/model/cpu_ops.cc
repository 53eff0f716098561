#include "model/cpu_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "codec/numeric.h"
#include "core/check.h"
#include "core/parallel.h"

namespace hiq::cpu {
namespace {

// IEEE half to float, exactly (subnormals, ±Inf and NaN included).
float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Element i of a weight array, widened to float.
float load(WeightType type, const void* data, int64_t i) {
  switch (type) {
    case WeightType::kBf16: return numeric::bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case WeightType::kF16: return f16_to_float(static_cast<const uint16_t*>(data)[i]);
    case WeightType::kF32: return static_cast<const float*>(data)[i];
  }
  return 0.0f;
}

// One row of a weight matrix, widened into `out` (the one dtype switch of a matmul).
void widen_row(const MatrixView& w, int64_t row, float* out) {
  const int64_t n = w.cols, first = row * w.cols;
  switch (w.type) {
    case WeightType::kBf16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + first;
      for (int64_t i = 0; i < n; ++i) out[i] = numeric::bf16_to_float(p[i]);
      return;
    }
    case WeightType::kF16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + first;
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(p[i]);
      return;
    }
    case WeightType::kF32: {
      const auto* p = static_cast<const float*>(w.data) + first;
      std::copy(p, p + n, out);
      return;
    }
  }
}

// Multiply-adds a thread's share of a loop should have at least, so that
// waking a worker costs little beside it.
constexpr int64_t kParallelWork = int64_t{1} << 18;
// Elements a thread's share of an elementwise loop should have at least.
constexpr int64_t kParallelElements = int64_t{1} << 15;

}  // namespace

void read_row(const MatrixView& w, int64_t row, float* out) {
  HIQ_CHECK(row >= 0 && row < w.rows);
  widen_row(w, row, out);
}

void matmul(const float* x, int64_t m, const MatrixView& w, const VectorView& bias, float* y) {
  HIQ_CHECK(w.data != nullptr && w.rows > 0 && w.cols > 0);
  HIQ_CHECK(bias.data == nullptr || bias.size == w.rows);
  // Output features split across threads; each is computed the same way
  // whichever thread runs it, so the result does not depend on the split.
  parallel_for(w.rows, kParallelWork / (w.cols * m) + 1, [&](int64_t first, int64_t last) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    // Weight row outermost: each row is widened once and used by every token.
    for (int64_t j = first; j < last; ++j) {
      widen_row(w, j, row.data());
      const float b = bias.data ? load(bias.type, bias.data, j) : 0.0f;
      for (int64_t t = 0; t < m; ++t) {
        const float* xt = x + t * w.cols;
        // Four partial sums: independent chains the compiler can vectorise.
        float s[4] = {0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 4 <= w.cols; i += 4)
          for (int k = 0; k < 4; ++k) s[k] += xt[i + k] * row[static_cast<size_t>(i + k)];
        for (; i < w.cols; ++i) s[0] += xt[i] * row[static_cast<size_t>(i)];
        y[t * w.rows + j] = (s[0] + s[1]) + (s[2] + s[3]) + b;
      }
    }
  });
}

void rms_norm(const float* x, int64_t m, int64_t n, const VectorView& weight, float eps, float* y,
              bool bf16_normalized) {
  HIQ_CHECK(weight.data != nullptr && weight.size == n);
  parallel_for(m, kParallelElements / n + 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      const float* xt = x + t * n;
      float* yt = y + t * n;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xt[i]) * xt[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
      for (int64_t i = 0; i < n; ++i) {
        float normalized = xt[i] * inv;
        if (bf16_normalized) normalized = numeric::bf16_to_float(numeric::float_to_bf16(normalized));
        yt[i] = normalized * load(weight.type, weight.data, i);
      }
    }
  });
}

void silu_mul(const float* gate, const float* up, size_t n, float* out) {
  parallel_for(static_cast<int64_t>(n), kParallelElements, [&](int64_t first, int64_t last) {
    for (auto i = static_cast<size_t>(first); i < static_cast<size_t>(last); ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  });
}

void apply_rope(float* x, int heads, int head_dim, int64_t position, const RopeTable& table) {
  const int half = head_dim / 2;
  HIQ_CHECK(static_cast<int>(table.inv_freq.size()) == half);
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // θ in float, as the reference computes position · inv_freq.
    const float theta = static_cast<float>(position) * table.inv_freq[static_cast<size_t>(i)];
    cos_t[static_cast<size_t>(i)] = std::cos(theta) * table.attention_scale;
    sin_t[static_cast<size_t>(i)] = std::sin(theta) * table.attention_scale;
  }
  for (int h = 0; h < heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half], c = cos_t[static_cast<size_t>(i)], s = sin_t[static_cast<size_t>(i)];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

void attention(const float* q, int64_t n_q, const float* k, const float* v, int64_t n_kv, int heads, int kv_heads,
               int head_dim, int64_t first_position, float scale, float* out) {
  HIQ_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0);
  HIQ_CHECK(n_kv >= first_position + n_q);
  const int group = heads / kv_heads;
  // (query, head) pairs split across threads, each computed whole by one.
  parallel_for(n_q * heads, 4 * kParallelWork / (n_kv * head_dim) + 1, [&](int64_t first, int64_t last) {
    std::vector<float> scores(static_cast<size_t>(n_kv));
    for (int64_t pair = first; pair < last; ++pair) {
      const int64_t t = pair / heads;
      const auto h = static_cast<int>(pair % heads);
      const int64_t visible = first_position + t + 1;  // causal: keys at positions ≤ the query's
      const float* qh = q + (t * heads + h) * head_dim;
      const int kvh = h / group;
      float max_score = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* kj = k + (j * kv_heads + kvh) * head_dim;
        float dot = 0;
        for (int d = 0; d < head_dim; ++d) dot += qh[d] * kj[d];
        scores[static_cast<size_t>(j)] = dot * scale;
        max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
      }
      float total = 0;
      for (int64_t j = 0; j < visible; ++j) {
        scores[static_cast<size_t>(j)] = std::exp(scores[static_cast<size_t>(j)] - max_score);
        total += scores[static_cast<size_t>(j)];
      }
      float* oh = out + (t * heads + h) * head_dim;
      std::fill(oh, oh + head_dim, 0.0f);
      for (int64_t j = 0; j < visible; ++j) {
        const float p = scores[static_cast<size_t>(j)] / total;
        const float* vj = v + (j * kv_heads + kvh) * head_dim;
        for (int d = 0; d < head_dim; ++d) oh[d] += p * vj[d];
      }
    }
  });
}

void round_to_bf16(float* x, size_t n) {
  parallel_for(static_cast<int64_t>(n), kParallelElements, [&](int64_t first, int64_t last) {
    for (auto i = static_cast<size_t>(first); i < static_cast<size_t>(last); ++i)
      x[i] = numeric::bf16_to_float(numeric::float_to_bf16(x[i]));
  });
}

}  // namespace hiq::cpu
