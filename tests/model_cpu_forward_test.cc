// The CPU forward pass: against an independent double-precision reference of
// the Qwen3 architecture (within BF16 rounding), token by token equal to one
// prefill (the KV it reads back from L1 is the KV it wrote), reading the prefix
// through L1 (changing L1 changes the result), and clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codec/numeric.h"
#include "core/parallel.h"
#include "kv/model_config.h"
#include "model/cpu_forward.h"
#include "tiny_model.h"

namespace hiq {
namespace {

using cpu::MatrixView;
using cpu::VectorView;
using testing::TinyModel;

double at(const MatrixView& m, int64_t r, int64_t c) { return static_cast<const float*>(m.data)[r * m.cols + c]; }
double at(const VectorView& v, int64_t i) { return static_cast<const float*>(v.data)[i]; }

// The architecture in double precision, written from its definition.
std::vector<double> reference_logits(const TinyModel& m, const std::vector<int32_t>& tokens) {
  const ModelShape& s = m.shape;
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t H = s.hidden_size, D = s.head_dim;
  auto linear = [](const std::vector<double>& x, const MatrixView& w) {
    std::vector<double> y(static_cast<size_t>(w.rows));
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t c = 0; c < w.cols; ++c) y[static_cast<size_t>(r)] += x[static_cast<size_t>(c)] * at(w, r, c);
    return y;
  };
  auto rms = [&](std::vector<double> x, const VectorView& w, size_t begin, size_t len) {
    double ss = 0;
    for (size_t i = begin; i < begin + len; ++i) ss += x[i] * x[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(len) + s.rms_norm_eps);
    for (size_t i = begin; i < begin + len; ++i) x[i] = x[i] * inv * at(w, static_cast<int64_t>(i - begin));
    return x;
  };
  auto rope = [&](std::vector<double>& x, int heads, int64_t pos) {
    for (int h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double theta = static_cast<double>(pos) * s.rope.inv_freq[static_cast<size_t>(i)];
        const size_t a = static_cast<size_t>(h * D + i), b = static_cast<size_t>(h * D + i + D / 2);
        const double xa = x[a], xb = x[b];
        x[a] = xa * std::cos(theta) - xb * std::sin(theta);
        x[b] = xb * std::cos(theta) + xa * std::sin(theta);
      }
  };
  std::vector<std::vector<double>> h(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < H; ++i) h[static_cast<size_t>(t)].push_back(at(m.weights.embed_tokens, tokens[t], i));
  for (const LayerWeights& l : m.weights.layers) {
    std::vector<std::vector<double>> q(h.size()), k(h.size()), v(h.size());
    for (int64_t t = 0; t < n; ++t) {
      const auto x = rms(h[static_cast<size_t>(t)], l.input_norm, 0, static_cast<size_t>(H));
      q[t] = linear(x, l.q_proj), k[t] = linear(x, l.k_proj), v[t] = linear(x, l.v_proj);
      for (int hh = 0; hh < s.num_heads; ++hh) q[t] = rms(q[t], l.q_norm, static_cast<size_t>(hh * D), static_cast<size_t>(D));
      for (int hh = 0; hh < s.num_kv_heads; ++hh) k[t] = rms(k[t], l.k_norm, static_cast<size_t>(hh * D), static_cast<size_t>(D));
      rope(q[t], s.num_heads, t);
      rope(k[t], s.num_kv_heads, t);
    }
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> attn(static_cast<size_t>(s.num_heads * D));
      for (int hh = 0; hh < s.num_heads; ++hh) {
        const int kvh = hh / (s.num_heads / s.num_kv_heads);
        std::vector<double> p;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[t][static_cast<size_t>(hh * D + d)] * k[j][static_cast<size_t>(kvh * D + d)];
          p.push_back(dot / std::sqrt(static_cast<double>(D)));
        }
        const double mx = *std::max_element(p.begin(), p.end());
        double total = 0;
        for (double& e : p) total += (e = std::exp(e - mx));
        for (int64_t d = 0; d < D; ++d)
          for (int64_t j = 0; j <= t; ++j)
            attn[static_cast<size_t>(hh * D + d)] += p[static_cast<size_t>(j)] / total * v[j][static_cast<size_t>(kvh * D + d)];
      }
      const auto o = linear(attn, l.o_proj);
      for (int64_t i = 0; i < H; ++i) h[t][i] += o[i];
      const auto x = rms(h[t], l.post_attention_norm, 0, static_cast<size_t>(H));
      auto g = linear(x, l.gate_proj);
      const auto u = linear(x, l.up_proj);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const auto down = linear(g, l.down_proj);
      for (int64_t i = 0; i < H; ++i) h[t][i] += down[i];
    }
  }
  const auto x = rms(h.back(), m.weights.final_norm, 0, static_cast<size_t>(H));
  return linear(x, m.weights.lm_head);
}

std::vector<int32_t> prompt(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % 97);
  return t;
}

std::vector<SlotId> slots_of(size_t n) {
  std::vector<SlotId> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<SlotId>(63 - 3 * i);  // scattered, descending
  return s;
}

TEST(CpuForward, MatchesADoublePrecisionReferenceWithinBf16Rounding) {
  TinyModel m;
  ASSERT_TRUE(check_weights(m.shape, m.weights).is_ok());
  const auto tokens = prompt(12);
  auto l1 = m.pool();
  auto logits = cpu_forward(m.shape, m.weights, *l1, tokens, slots_of(12), 0);
  ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
  const auto want = reference_logits(m, tokens);
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += std::pow((*logits)[i] - want[i], 2);
    norm += want[i] * want[i];
  }
  // Every stored intermediate is rounded to BF16 (2^-9 relative), as in the
  // bf16 reference; through 3 layers of this 48-wide model that adds up to
  // about 1.6 % (0.3 % with K and V the only BF16 tensors): a wrong rotary
  // convention, head mapping or norm would be tens of percent.
  EXPECT_LT(std::sqrt(err / norm), 3e-2) << "relative error " << std::sqrt(err / norm);
  const auto top = [](auto& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
  EXPECT_EQ(top(*logits), top(want));
}

TEST(CpuForward, ContinuingFromKvInL1EqualsOnePrefillToTheBit) {
  TinyModel m;
  const auto tokens = prompt(10);
  const auto slots = slots_of(10);
  auto full_pool = m.pool();
  auto full = cpu_forward(m.shape, m.weights, *full_pool, tokens, slots, 0, /*all_logits=*/true);
  ASSERT_TRUE(full.is_ok());
  // A prefix of 6, then a continuation of 2, then two decode steps.
  auto l1 = m.pool();
  const auto vocab = static_cast<size_t>(m.shape.vocab_size);
  auto run = [&](size_t end, size_t first_new) {
    return cpu_forward(m.shape, m.weights, *l1, std::span(tokens).first(end), std::span(slots).first(end), first_new,
                       true);
  };
  ASSERT_TRUE(run(6, 0).is_ok());
  auto cont = run(8, 6);
  ASSERT_TRUE(cont.is_ok());
  EXPECT_TRUE(std::equal(cont->begin(), cont->end(), full->begin() + 6 * vocab));
  for (size_t end = 9; end <= 10; ++end) {
    auto step = run(end, end - 1);
    ASSERT_TRUE(step.is_ok());
    EXPECT_TRUE(std::equal(step->begin(), step->end(), full->begin() + (end - 1) * vocab)) << end;
  }
}

// A pass computes the last layer past its K and V (attention, O projection,
// MLP) on the rows whose logits are wanted alone: a sequence that wants its
// last row's gets the bits of that row in a pass that computes them all,
// also in a batch whose other sequences want every row (their rows stay in
// place among the kept) or continue a cached prefix.
TEST(CpuForward, TheLastLayerOnTheWantedRowsAloneGivesTheSameBits) {
  TinyModel m;
  const auto tokens = prompt(120);
  const auto vocab = static_cast<size_t>(m.shape.vocab_size);
  std::vector<SlotId> slots(3 * tokens.size());
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<SlotId>(i);
  // The third sequence continues a cached prefix of 30 tokens.
  const std::vector<size_t> lengths = {120, 45, 77}, first_new = {0, 0, 30};
  const auto sequence = [&](size_t i, bool all) {
    return CpuSequence{std::span(tokens).first(lengths[i]),
                       std::span(slots).subspan(i * tokens.size(), lengths[i]), first_new[i], all, nullptr};
  };
  std::vector<CpuSequence> every, mixed;
  for (size_t i = 0; i < lengths.size(); ++i) {
    every.push_back(sequence(i, true));
    mixed.push_back(sequence(i, i == 1));  // the middle one wants every row
  }
  auto l1 = m.pool(slots.size());
  ASSERT_TRUE(cpu_forward(m.shape, m.weights, *l1, std::span(tokens).first(first_new[2]),
                          std::span(slots).subspan(2 * tokens.size(), first_new[2]), 0)
                  .is_ok());
  auto all = cpu_forward_batch(m.shape, m.weights, *l1, every);
  auto some = cpu_forward_batch(m.shape, m.weights, *l1, mixed);
  ASSERT_TRUE(all.is_ok() && some.is_ok()) << some.status().to_string();
  for (size_t i = 0; i < lengths.size(); ++i) {
    SCOPED_TRACE(i);
    const std::vector<float>& a = (*all)[i];
    const std::vector<float>& b = (*some)[i];
    ASSERT_EQ(a.size(), (lengths[i] - first_new[i]) * vocab);
    if (i == 1) {
      EXPECT_TRUE(a == b);
    } else {
      ASSERT_EQ(b.size(), vocab);
      EXPECT_TRUE(std::equal(b.begin(), b.end(), a.end() - static_cast<std::ptrdiff_t>(vocab)));
    }
  }
  // Alone, too.
  auto alone = cpu_forward(m.shape, m.weights, *l1, mixed[0].tokens, mixed[0].slots, 0);
  ASSERT_TRUE(alone.is_ok());
  EXPECT_TRUE(*alone == (*some)[0]);
}

// The forward pass splits its matrix products and attention across threads;
// every value is computed the same way whichever thread computes it, so the
// logits are the same bits on 1, 2 and 3 threads.
TEST(CpuForward, ThreadsGiveTheSameBits) {
  TinyModel m;
  const auto tokens = prompt(200);
  std::vector<SlotId> slots(200);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<SlotId>(255 - i);
  const int before = parallel_threads();
  std::vector<std::vector<float>> logits;
  for (int threads : {1, 2, 3}) {
    set_parallel_threads(threads);
    auto l1 = m.pool(256);
    auto out = cpu_forward(m.shape, m.weights, *l1, tokens, slots, 0, /*all_logits=*/true);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    logits.push_back(std::move(*out));
  }
  set_parallel_threads(before);
  EXPECT_TRUE(logits[0] == logits[1]);
  EXPECT_TRUE(logits[0] == logits[2]);
}

// A batch shares its matrix products: a prefill, a continuation that wants
// every position's logits, and decode steps over contexts longer than an
// attention key block, run in one pass, get the bits each gets alone — on
// one thread and on three — and leave the same KV in L1.
TEST(CpuForward, ABatchGivesEachSequenceTheBitsItGetsAlone) {
  TinyModel m;
  constexpr size_t kSlots = 3 * 700;
  const auto tokens = prompt(700);
  // Sequence s owns slots [s · 700, s · 700 + 700), in a scattered order.
  const auto slots_for = [](size_t s) {
    std::vector<SlotId> out(700);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<SlotId>(s * 700 + (i * 37) % 700);
    return out;
  };
  const std::vector<std::vector<SlotId>> slots = {slots_for(0), slots_for(1), slots_for(2)};
  // Each sequence: (tokens it has, first new one, all logits).
  struct Shape {
    size_t length, first_new;
    bool all;
  };
  const std::vector<Shape> shapes = {{300, 0, false}, {650, 600, true}, {700, 699, false}};
  const auto sequence_of = [&](size_t i) {
    return CpuSequence{std::span(tokens).first(shapes[i].length), std::span(slots[i]).first(shapes[i].length),
                       shapes[i].first_new, shapes[i].all, nullptr};
  };
  // The prefixes each sequence has before the batch, written by one pass each.
  const auto prepared_pool = [&] {
    auto l1 = m.pool(kSlots);
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (shapes[i].first_new == 0) continue;
      EXPECT_TRUE(cpu_forward(m.shape, m.weights, *l1, std::span(tokens).first(shapes[i].first_new),
                              std::span(slots[i]).first(shapes[i].first_new), 0)
                      .is_ok());
    }
    return l1;
  };
  // Every K and V row of the pool, layer by layer.
  const auto contents = [&](DeviceKvPool& l1) {
    std::vector<SlotId> every(kSlots);
    for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<SlotId>(i);
    std::vector<uint16_t> rows(every.size() * static_cast<size_t>(m.shape.num_kv_heads * m.shape.head_dim)), all;
    for (int layer = 0; layer < m.shape.num_layers; ++layer)
      for (KvPart part : {KvPart::kK, KvPart::kV}) {
        EXPECT_TRUE(l1.read_rows(layer, part, every, rows.data()).is_ok());
        all.insert(all.end(), rows.begin(), rows.end());
      }
    return all;
  };

  // Alone, on 3 threads: the decode step's 4 rows (fewer than 2 a thread)
  // take the key-block split (cpu_ops.h), where the batch's many rows are
  // split by row.
  const int before = parallel_threads();
  set_parallel_threads(3);
  auto alone_pool = prepared_pool();
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const CpuSequence seq = sequence_of(i);
    auto out = cpu_forward(m.shape, m.weights, *alone_pool, seq.tokens, seq.slots, seq.first_new, seq.all_logits);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    alone.push_back(std::move(*out));
  }
  for (int threads : {1, 3}) {
    set_parallel_threads(threads);
    auto l1 = prepared_pool();
    const std::vector<CpuSequence> batch = {sequence_of(0), sequence_of(1), sequence_of(2)};
    auto together = cpu_forward_batch(m.shape, m.weights, *l1, batch);
    ASSERT_TRUE(together.is_ok()) << together.status().to_string();
    ASSERT_EQ(together->size(), shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_TRUE((*together)[i] == alone[i]) << "sequence " << i << " on " << threads << " threads";
    EXPECT_TRUE(contents(*l1) == contents(*alone_pool)) << threads << " threads";
  }
  set_parallel_threads(before);
}

// The class of batches the scheduler forms, drawn at random: 1–5 sequences,
// some on a prefix another also reads (the same slots), fresh prompts and
// decode steps and continuations, all logits or the last, on 1–3 threads.
// Each sequence's logits are the bits of its own pass and of the batch's
// pass with every row's logits wanted, and the pool ends the same.
TEST(CpuForward, RandomBatchesGiveEachSequenceTheBitsOfItsOwnPass) {
  TinyModel m;
  constexpr size_t kSlots = 4096;
  std::mt19937 rng(2026);
  const int before = parallel_threads();
  for (int trial = 0; trial < 24; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const auto pick = [&](size_t lo, size_t hi) { return std::uniform_int_distribution<size_t>(lo, hi)(rng); };
    // Prefixes: a few token runs in their own slots, computed before the batch.
    struct Prefix {
      std::vector<int32_t> tokens;
      std::vector<SlotId> slots;
    };
    std::vector<Prefix> prefixes(pick(1, 3));
    std::vector<SlotId> free_slots(kSlots);
    for (size_t i = 0; i < kSlots; ++i) free_slots[i] = static_cast<SlotId>(i);
    std::shuffle(free_slots.begin(), free_slots.end(), rng);
    size_t next_free = 0;
    for (Prefix& p : prefixes) {
      const size_t n = pick(0, 600);
      for (size_t i = 0; i < n; ++i) {
        p.tokens.push_back(static_cast<int32_t>(pick(0, static_cast<size_t>(m.shape.vocab_size) - 1)));
        p.slots.push_back(free_slots[next_free++]);
      }
    }
    // Sequences: a prefix (or none), then new tokens in fresh slots.
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<SlotId>> slots;
    std::vector<CpuSequence> batch;
    std::vector<size_t> first_new;
    const size_t count = pick(1, 5);
    for (size_t b = 0; b < count; ++b) {
      const Prefix& p = prefixes[pick(0, prefixes.size() - 1)];
      tokens.push_back(p.tokens);
      slots.push_back(p.slots);
      first_new.push_back(p.tokens.size());
      const size_t n_new = pick(0, 3) == 0 ? pick(1, 40) : 1;
      for (size_t i = 0; i < n_new; ++i) {
        tokens.back().push_back(static_cast<int32_t>(pick(0, static_cast<size_t>(m.shape.vocab_size) - 1)));
        slots.back().push_back(free_slots[next_free++]);
      }
    }
    for (size_t b = 0; b < count; ++b) batch.push_back(CpuSequence{tokens[b], slots[b], first_new[b], pick(0, 1) == 1, nullptr});
    const auto prepared = [&] {
      auto l1 = m.pool(kSlots);
      for (const Prefix& p : prefixes) {
        if (p.tokens.empty()) continue;
        EXPECT_TRUE(cpu_forward(m.shape, m.weights, *l1, p.tokens, p.slots, 0).is_ok());
      }
      return l1;
    };
    set_parallel_threads(static_cast<int>(pick(1, 3)));
    auto alone_pool = prepared();
    std::vector<std::vector<float>> alone;
    for (const CpuSequence& seq : batch) {
      auto out = cpu_forward(m.shape, m.weights, *alone_pool, seq.tokens, seq.slots, seq.first_new, seq.all_logits);
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      alone.push_back(std::move(*out));
    }
    set_parallel_threads(static_cast<int>(pick(1, 3)));
    auto l1 = prepared();
    auto together = cpu_forward_batch(m.shape, m.weights, *l1, batch);
    ASSERT_TRUE(together.is_ok()) << together.status().to_string();
    EXPECT_TRUE(*together == alone);
    // With every row's logits wanted the last layer computes every row: the
    // rows a sequence wanted are the same bits there.
    std::vector<CpuSequence> every = batch;
    for (CpuSequence& seq : every) seq.all_logits = true;
    auto every_pool = prepared();
    auto all_rows = cpu_forward_batch(m.shape, m.weights, *every_pool, every);
    ASSERT_TRUE(all_rows.is_ok()) << all_rows.status().to_string();
    for (size_t b = 0; b < count; ++b) {
      const std::vector<float>& got = (*together)[b];
      const std::vector<float>& all = (*all_rows)[b];
      ASSERT_LE(got.size(), all.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), all.end() - static_cast<std::ptrdiff_t>(got.size())))
          << "sequence " << b;
    }
    std::vector<SlotId> used(free_slots.begin(), free_slots.begin() + static_cast<std::ptrdiff_t>(next_free));
    const size_t row = static_cast<size_t>(m.shape.num_kv_heads * m.shape.head_dim);
    std::vector<uint16_t> a(used.size() * row), b(a.size());
    for (int layer = 0; layer < m.shape.num_layers; ++layer)
      for (KvPart part : {KvPart::kK, KvPart::kV}) {
        ASSERT_TRUE(alone_pool->read_rows(layer, part, used, a.data()).is_ok());
        ASSERT_TRUE(l1->read_rows(layer, part, used, b.data()).is_ok());
        EXPECT_TRUE(a == b) << "layer " << layer;
      }
  }
  set_parallel_threads(before);
}

// A pass writes each layer's new K and V before any attention reads: a slot
// written twice, or written by one token and read as context by another,
// would depend on that order, and is refused with nothing written. Sharing
// a context slot (a common prefix) is fine, and an empty batch is no work.
TEST(CpuForward, ABatchRefusesASlotWrittenTwiceOrWrittenAndReadAndTakesSharedContext) {
  TinyModel m;
  const auto tokens = prompt(4);
  auto l1 = m.pool();
  ASSERT_TRUE(cpu_forward(m.shape, m.weights, *l1, std::span(tokens).first(2), std::vector<SlotId>{0, 1}, 0).is_ok());
  const auto refused = [&](const std::vector<CpuSequence>& batch, const std::string& why) {
    auto out = cpu_forward_batch(m.shape, m.weights, *l1, batch);
    ASSERT_FALSE(out.is_ok()) << why;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(out.status().message().find("L1 slot"), std::string::npos) << why << ": " << out.status().to_string();
  };
  const std::vector<SlotId> a = {0, 1, 2, 3}, b = {0, 1, 5, 3}, c = {0, 1, 2, 2}, d = {0, 1, 6, 7}, e = {0, 6, 8, 9};
  refused({{tokens, a, 2, false, nullptr}, {tokens, b, 2, false, nullptr}}, "slot 3 written by two sequences");
  refused({{tokens, c, 2, false, nullptr}}, "slot 2 written twice by one");
  refused({{tokens, d, 2, false, nullptr}, {tokens, e, 2, false, nullptr}}, "slot 6 written by one, read by the other");
  // Two sequences on the shared prefix {0, 1}, each writing its own slots.
  const std::vector<SlotId> f = {0, 1, 10, 11}, g = {0, 1, 12, 13};
  auto shared = cpu_forward_batch(m.shape, m.weights, *l1,
                                  std::vector<CpuSequence>{{tokens, f, 2, false, nullptr}, {tokens, g, 2, false, nullptr}});
  ASSERT_TRUE(shared.is_ok()) << shared.status().to_string();
  EXPECT_EQ((*shared)[0], (*shared)[1]);  // the same tokens on the same prefix
  auto none = cpu_forward_batch(m.shape, m.weights, *l1, {});
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());
}

TEST(CpuForward, ThePrefixIsReadFromL1) {
  TinyModel m;
  const auto tokens = prompt(8);
  const auto slots = slots_of(8);
  auto l1 = m.pool();
  auto first = cpu_forward(m.shape, m.weights, *l1, tokens, slots, 0);
  ASSERT_TRUE(first.is_ok());
  // Recompute the last token over the cached prefix: the same logits …
  auto again = cpu_forward(m.shape, m.weights, *l1, tokens, slots, 7);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *first);
  // … and different ones once the prefix's K in L1 is changed.
  std::vector<uint16_t> row(static_cast<size_t>(m.shape.num_kv_heads * m.shape.head_dim), numeric::float_to_bf16(0.5f));
  const SlotId one[] = {slots[2]};
  ASSERT_TRUE(l1->write_rows(1, KvPart::kK, one, row.data()).is_ok());
  auto changed = cpu_forward(m.shape, m.weights, *l1, tokens, slots, 7);
  ASSERT_TRUE(changed.is_ok());
  EXPECT_NE(*changed, *first);
}

// A pass of a few rows (decode steps, a short continuation) runs its layers
// on a team of threads, a longer one hands out its loops; one thread runs
// neither. Decode batches of 1 to 9 sequences over contexts of one and of
// several attention key blocks, on models with and without QK-norm, with
// biases on every projection and head counts that split unevenly: each
// gives the bits of one thread and leaves the same K and V in L1.
TEST(CpuForward, ATeamPassGivesTheBitsOfOneThread) {
  TinyModel::Spec odd;
  odd.num_heads = 6, odd.num_kv_heads = 3, odd.head_dim = 24, odd.hidden_size = 40, odd.intermediate_size = 72;
  odd.qk_norm = false;
  for (const TinyModel::Spec& spec : {TinyModel::Spec{}, odd}) {
    TinyModel m(spec);
    if (!spec.qk_norm)
      for (LayerWeights& l : m.weights.layers) {
        const auto bias = [&](int64_t n) { return VectorView{cpu::WeightType::kF32, m.tensor(static_cast<size_t>(n), 0.5f), n}; };
        l.q_bias = bias(l.q_proj.rows), l.k_bias = bias(l.k_proj.rows), l.v_bias = bias(l.v_proj.rows);
        l.o_bias = bias(l.o_proj.rows);
      }
    constexpr size_t kContext = 300, kSequences = 9;  // 300: two key blocks
    const size_t kSlots = kSequences * (kContext + 2);
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> tokens(kSequences);
    std::vector<std::vector<SlotId>> slots(kSequences);
    for (size_t b = 0; b < kSequences; ++b)
      for (size_t i = 0; i < kContext + 2; ++i) {
        tokens[b].push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(m.shape.vocab_size)));
        slots[b].push_back(static_cast<SlotId>(i * kSequences + b));  // interleaved
      }
    const int before = parallel_threads();
    const auto run = [&](int threads, size_t batch, size_t context, std::vector<uint16_t>& kv) {
      set_parallel_threads(1);
      auto l1 = m.pool(kSlots);
      for (size_t b = 0; b < batch; ++b)
        EXPECT_TRUE(cpu_forward(m.shape, m.weights, *l1, std::span(tokens[b]).first(context),
                                std::span(slots[b]).first(context), 0)
                        .is_ok());
      set_parallel_threads(threads);
      // Two steps: one token each, then (one step later) a continuation of two.
      std::vector<std::vector<float>> logits;
      for (size_t step = 0; step < 2; ++step) {
        std::vector<CpuSequence> seqs;
        for (size_t b = 0; b < batch; ++b) {
          const size_t n = context + 1 + step;
          seqs.push_back(CpuSequence{std::span(tokens[b]).first(n), std::span(slots[b]).first(n),
                                     step == 0 ? context : context + 1, step == 1, nullptr});
        }
        auto out = cpu_forward_batch(m.shape, m.weights, *l1, seqs);
        EXPECT_TRUE(out.is_ok()) << out.status().to_string();
        if (out) logits.insert(logits.end(), out->begin(), out->end());
      }
      std::vector<SlotId> every(kSlots);
      for (size_t i = 0; i < kSlots; ++i) every[i] = static_cast<SlotId>(i);
      const size_t row = static_cast<size_t>(m.shape.num_kv_heads * m.shape.head_dim);
      kv.assign(kSlots * row * 2 * static_cast<size_t>(m.shape.num_layers), 0);
      for (int layer = 0; layer < m.shape.num_layers; ++layer)
        for (int part = 0; part < 2; ++part)
          EXPECT_TRUE(l1->read_rows(layer, static_cast<KvPart>(part), every,
                                    kv.data() + (static_cast<size_t>(layer) * 2 + static_cast<size_t>(part)) * kSlots * row)
                          .is_ok());
      return logits;
    };
    for (size_t batch : {size_t{1}, size_t{4}, kSequences})
      for (size_t context : {size_t{1}, kContext}) {
        std::vector<uint16_t> kv_one, kv;
        const auto one = run(1, batch, context, kv_one);
        for (int threads : {2, 3, 5}) {
          SCOPED_TRACE("batch " + std::to_string(batch) + ", context " + std::to_string(context) + ", " +
                       std::to_string(threads) + " threads, " + std::to_string(spec.num_heads) + " heads");
          EXPECT_TRUE(run(threads, batch, context, kv) == one);
          EXPECT_TRUE(kv == kv_one);
        }
      }
    set_parallel_threads(before);
  }
}

// An L1 in host memory that counts write_rows calls: a team pass writes
// its K and V into the planes in place, the loops through write_rows.
class CountingPool final : public DeviceKvPool {
 public:
  explicit CountingPool(std::unique_ptr<DeviceKvPool> inner)
      : DeviceKvPool(inner->geometry(), inner->num_slots()), inner_(std::move(inner)) {}
  uint16_t* plane(int layer, KvPart part) override { return inner_->plane(layer, part); }
  bool host_accessible() const override { return true; }
  Status write_rows(int layer, KvPart part, std::span<const SlotId> slots, const uint16_t* rows) override {
    ++writes;
    return inner_->write_rows(layer, part, slots, rows);
  }
  int writes = 0;

 private:
  std::unique_ptr<DeviceKvPool> inner_;
};

// Up to 32 rows run on the team (on more than one thread), 33 on the loops;
// both give the bits of one thread.
TEST(CpuForward, APassOfUpTo32RowsRunsOnTheTeamAndLongerOnTheLoops) {
  TinyModel m;
  const auto tokens = prompt(40);
  std::vector<SlotId> slots(40);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<SlotId>(i * 7 % 64);  // scattered
  const int before = parallel_threads();
  for (size_t n_new : {size_t{32}, size_t{33}}) {
    SCOPED_TRACE(std::to_string(n_new) + " new tokens");
    std::vector<std::vector<float>> logits;
    for (int threads : {1, 2}) {
      set_parallel_threads(threads);
      CountingPool l1(m.pool());
      const size_t first = 40 - n_new;
      ASSERT_TRUE(cpu_forward(m.shape, m.weights, l1, std::span(tokens).first(first), std::span(slots).first(first), 0)
                      .is_ok());
      l1.writes = 0;
      auto out = cpu_forward(m.shape, m.weights, l1, tokens, slots, first, /*all_logits=*/true);
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      logits.push_back(std::move(*out));
      const bool team = threads > 1 && n_new <= 32;
      EXPECT_EQ(l1.writes, team ? 0 : 2 * m.shape.num_layers) << threads << " threads";
    }
    EXPECT_TRUE(logits[0] == logits[1]);
  }
  set_parallel_threads(before);
}

// A step's layers wait for their restores (before_attention) in layer
// order, each once, whatever runs them; a wait that fails stops the pass
// with its error, on a team as on one thread.
TEST(CpuForward, RestoreWaitsComeInLayerOrderAndTheirErrorStopsThePass) {
  TinyModel m;
  const auto tokens = prompt(6);
  const auto slots = slots_of(6);
  const int before = parallel_threads();
  std::vector<float> without_waits;
  for (int threads : {1, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    set_parallel_threads(threads);
    auto l1 = m.pool();
    ASSERT_TRUE(cpu_forward(m.shape, m.weights, *l1, std::span(tokens).first(5), std::span(slots).first(5), 0).is_ok());
    std::vector<int> layers;
    auto out = cpu_forward(m.shape, m.weights, *l1, tokens, slots, 5, false, [&](int layer) {
      layers.push_back(layer);
      return Status::ok();
    });
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(layers, (std::vector<int>{0, 1, 2}));
    if (threads == 1) {
      without_waits = *out;
    } else {
      EXPECT_TRUE(*out == without_waits) << "a team pass that waits gives the bits of one thread";
    }
    layers.clear();
    out = cpu_forward(m.shape, m.weights, *l1, tokens, slots, 5, false, [&](int layer) {
      layers.push_back(layer);
      return layer == 1 ? unavailable("restore of layer 1 failed") : Status::ok();
    });
    ASSERT_FALSE(out.is_ok());
    EXPECT_EQ(out.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(out.status().message().find("layer 1"), std::string::npos);
    EXPECT_EQ(layers, (std::vector<int>{0, 1}));
  }
  set_parallel_threads(before);
}

TEST(CpuForward, BadInputsAreClearErrors) {
  TinyModel m;
  auto l1 = m.pool();
  const auto tokens = prompt(4);
  EXPECT_EQ(cpu_forward(m.shape, m.weights, *l1, tokens, slots_of(3), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu_forward(m.shape, m.weights, *l1, tokens, slots_of(4), 4).status().code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> bad = {1, 2, 97};
  EXPECT_EQ(cpu_forward(m.shape, m.weights, *l1, bad, slots_of(3), 0).status().code(), StatusCode::kOutOfRange);
  CpuModelWeights w = m.weights;
  w.layers[1].k_proj.rows = 31;
  const Status s = check_weights(m.shape, w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 1 k_proj"), std::string::npos) << s.message();
  w = m.weights;
  w.layers[0].q_norm.data = nullptr;
  EXPECT_NE(check_weights(m.shape, w).message().find("layer 0 q_norm is missing"), std::string::npos);
}

}  // namespace
}  // namespace hiq
