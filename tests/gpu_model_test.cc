// The CUDA forward pass against the CPU backend and against transformers'
// logits for the committed tiny checkpoints: one sequence, batches of
// sequences with different cached prefixes, long-context decode (split
// attention), a prefix restored from L2 through each codec, and bad input.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cache/radix_cache.h"
#include "cuda/buffers.h"
#include "cuda/device.h"
#include "engine/cpu_model_runner.h"
#include "engine/cuda_model_runner.h"
#include "engine/scheduler.h"
#include "gpu_test_policy.h"
#include "memory/cuda_device_kv_pool.h"
#include "memory/host_kv_pool.h"
#include "model/cuda/gemm_sm90.h"
#include "model/cuda_model.h"
#include "model/loaded_model.h"
#include "relative_error.h"
#include "tiny_model.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq {
namespace {

using testing::TinyModel;

class GpuModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HIQ_SKIP_OR_FAIL_WITHOUT_GPU();
  }
};

using testing::relative_error;

using testing::iota_slots;
using testing::random_tokens;

// Rows [first, last) of a [rows][vocab] logits matrix.
std::span<const float> logit_rows(const std::vector<float>& logits, int vocab, size_t first, size_t last) {
  return std::span(logits).subspan(first * vocab, (last - first) * vocab);
}

// The first `steps` greedy tokens after `prompt`, one decode step at a time.
std::vector<int32_t> greedy(CudaModel& model, DeviceKvPool& l1, std::vector<int32_t> tokens, int steps) {
  const std::vector<SlotId> slots = iota_slots(tokens.size() + steps);
  std::vector<int32_t> out;
  size_t first_new = 0;
  for (int i = 0; i < steps; ++i) {
    const ModelSequence seq{tokens, std::span(slots).first(tokens.size()), first_new};
    auto result = model.forward(l1, std::span(&seq, 1), LogitsWanted::kNone);
    EXPECT_TRUE(result.is_ok()) << result.status().to_string();
    if (!result) return out;
    out.push_back(result->next_tokens[0]);
    first_new = tokens.size();
    tokens.push_back(result->next_tokens[0]);
  }
  return out;
}

TEST_F(GpuModelTest, MatchesTransformersOnTheTinyCheckpoints) {
  for (const char* name : {"tiny-qwen3", "tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(name);
    const std::string dir = std::string(HIQ_TEST_MODELS_DIR) + "/" + name;
    auto loaded = LoadedModel::load(dir);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    const LoadedModel& m = **loaded;
    auto model = make_cuda_model(m.shape(), m.weights());
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    auto l1 = make_cuda_device_kv_pool(m.config().kv_geometry(), 64);
    ASSERT_TRUE(l1.is_ok());
    std::ifstream in(dir + "/expected.json");
    const nlohmann::json expected = nlohmann::json::parse(in);
    for (size_t p = 0; p < expected["prompts"].size(); ++p) {
      const auto prompt = expected["prompts"][p].get<std::vector<int32_t>>();
      const std::vector<SlotId> slots = iota_slots(prompt.size());
      const ModelSequence seq{prompt, slots, 0};
      auto out = (*model)->forward(**l1, std::span(&seq, 1), LogitsWanted::kAll);
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      std::vector<float> reference;
      for (const auto& row : expected["logits_bf16"][p]) for (float v : row) reference.push_back(v);
      ASSERT_EQ(out->logits.size(), reference.size());
      const double error = relative_error(out->logits, reference);
      std::printf("%s prompt %zu: relative error vs transformers bf16 %.2e\n", name, p, error);
      EXPECT_LT(error, 2e-2);
      // Greedy decoding agrees up to the first near tie of our logits (5 % of
      // their RMS), past which the sequences cannot be compared; transformers
      // stops early at the checkpoint's end-of-sequence token.
      const auto want = expected["greedy"][p].get<std::vector<int32_t>>();
      std::vector<int32_t> tokens = prompt;
      const std::vector<SlotId> decode_slots = iota_slots(prompt.size() + want.size());
      size_t first_new = 0;
      for (size_t step = 0; step < want.size(); ++step) {
        const ModelSequence s{tokens, std::span(decode_slots).first(tokens.size()), first_new};
        auto r = (*model)->forward(**l1, std::span(&s, 1), LogitsWanted::kLast);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        const int32_t ours = r->next_tokens[0];
        if (ours != want[step]) {
          double rms = 0;
          for (float x : r->logits) rms += double{x} * x;
          const double margin = 0.05 * std::sqrt(rms / static_cast<double>(r->logits.size()));
          EXPECT_LT(r->logits[static_cast<size_t>(ours)] - r->logits[static_cast<size_t>(want[step])], margin)
              << "prompt " << p << " step " << step << ": ours " << ours << ", transformers " << want[step];
          std::printf("%s prompt %zu: greedy agrees for %zu of %zu steps, then a near tie\n", name, p, step,
                      want.size());
          break;
        }
        first_new = tokens.size();
        tokens.push_back(ours);
      }
    }
  }
}

using testing::qwen3_like;

struct GpuModel {
  TinyModel tiny;
  std::unique_ptr<CudaModel> model;
  std::unique_ptr<DeviceKvPool> l1;
  explicit GpuModel(const TinyModel::Spec& spec, size_t slots, const CudaModelOptions& options = {}) : tiny(spec) {
    auto m = make_cuda_model(tiny.shape, tiny.weights, options);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    if (m) model = std::move(*m);
    auto pool = make_cuda_device_kv_pool(TinyModel::geometry_of(spec), slots);
    EXPECT_TRUE(pool.is_ok());
    if (pool) l1 = std::move(*pool);
  }
};

TEST_F(GpuModelTest, MatchesTheCpuBackendAtQwen3HeadDim) {
  const TinyModel::Spec spec = qwen3_like();
  GpuModel gpu(spec, 512);
  ASSERT_TRUE(gpu.model && gpu.l1);
  const std::vector<int32_t> tokens = random_tokens(300, spec.vocab_size, 1);
  const std::vector<SlotId> slots = iota_slots(tokens.size(), 100);
  const ModelSequence seq{tokens, slots, 0};
  auto out = gpu.model->forward(*gpu.l1, std::span(&seq, 1), LogitsWanted::kAll);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();

  auto cpu_l1 = gpu.tiny.pool(512);
  auto cpu = cpu_forward(gpu.tiny.shape, gpu.tiny.weights, *cpu_l1, tokens, slots, 0, /*all_logits=*/true);
  ASSERT_TRUE(cpu.is_ok());
  const double error = relative_error(out->logits, *cpu);
  std::printf("300-token prefill, CUDA vs CPU: relative error %.2e\n", error);
  EXPECT_LT(error, 2e-2);

  // The KV in L1 is the CPU's, up to BF16 rounding flips.
  std::vector<uint16_t> gpu_k(300 * 256), cpu_k(300 * 256);
  ASSERT_TRUE(gpu.l1->read_rows(1, KvPart::kK, slots, gpu_k.data()).is_ok());
  ASSERT_TRUE(cpu_l1->read_rows(1, KvPart::kK, slots, cpu_k.data()).is_ok());
  std::vector<float> gk(gpu_k.size()), ck(cpu_k.size());
  for (size_t i = 0; i < gk.size(); ++i) gk[i] = numeric::bf16_to_float(gpu_k[i]), ck[i] = numeric::bf16_to_float(cpu_k[i]);
  EXPECT_LT(relative_error(gk, ck), 2e-2);

  // The last 100 tokens again, on the first 200's KV in L1.
  const ModelSequence rest{tokens, slots, 200};
  auto continued = gpu.model->forward(*gpu.l1, std::span(&rest, 1), LogitsWanted::kAll);
  ASSERT_TRUE(continued.is_ok());
  const double continuation_error =
      relative_error(continued->logits, logit_rows(out->logits, spec.vocab_size, 200, 300));
  std::printf("continuation on a cached 200-token prefix vs one pass: relative error %.2e\n", continuation_error);
  EXPECT_LT(continuation_error, 1e-2);
}

// Prefill products with the residual adds and the SiLU gate in their
// epilogues (CudaModelOptions::fused_prefill, on a Hopper GPU): the function
// of the cuBLAS pass within BF16's rounding, for a fresh prompt and for a
// batch of a prompt on a cached prefix with a fresh one. (On an H100 the
// Hopper kernel's products came out the bits of cuBLAS's at these shapes —
// both sum k in order on the same instruction — so the passes may agree to
// the bit; the kernel tests in gpu_gemm_test.cc show the epilogues run.)
TEST_F(GpuModelTest, PrefillEpiloguesMatchTheCpuBackendAndTheUnfusedPass) {
  const TinyModel::Spec spec = qwen3_like();  // every product's shape the Hopper kernel takes
  CudaModelOptions options;
  options.fused_prefill = true;
  GpuModel fused(spec, 4096, options), plain(spec, 4096);
  ASSERT_TRUE(fused.model && fused.l1 && plain.model && plain.l1);
  {
    auto probe = cuda::device_alloc(1 << 16, "probe");
    ASSERT_TRUE(probe.is_ok());
    if (!cuda::gemm_sm90_supports(probe->get(), 1, probe->get(), 256, 64, probe->get(), cuda::Sm90Epilogue::kStore)) {
      GTEST_SKIP() << "not a compute capability 9.0 device: no epilogue path to test";
    }
  }
  const std::vector<int32_t> tokens = random_tokens(700, spec.vocab_size, 41);
  const std::vector<SlotId> slots = iota_slots(tokens.size(), 0);
  const ModelSequence seq{tokens, slots, 0};
  auto got = fused.model->forward(*fused.l1, std::span(&seq, 1), LogitsWanted::kAll);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  auto want = plain.model->forward(*plain.l1, std::span(&seq, 1), LogitsWanted::kAll);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  auto cpu_l1 = fused.tiny.pool(4096);
  auto cpu = cpu_forward(fused.tiny.shape, fused.tiny.weights, *cpu_l1, tokens, slots, 0, /*all_logits=*/true);
  ASSERT_TRUE(cpu.is_ok());
  std::printf("700-token prefill with epilogues: relative error %.2e vs CPU, %.2e vs the unfused pass\n",
              relative_error(got->logits, *cpu), relative_error(got->logits, want->logits));
  EXPECT_LT(relative_error(got->logits, *cpu), 2e-2);
  EXPECT_LT(relative_error(got->logits, want->logits), 1e-2);

  // 600 new tokens on a cached 300-token prefix, batched with a fresh 400-token prompt.
  const std::vector<int32_t> other = random_tokens(400, spec.vocab_size, 42);
  const std::vector<SlotId> other_slots = iota_slots(other.size(), 1000);
  const std::vector<int32_t> longer = random_tokens(900, spec.vocab_size, 43);
  const std::vector<SlotId> longer_slots = iota_slots(longer.size(), 2000);
  const ModelSequence prefix{std::span(longer).first(300), std::span(longer_slots).first(300), 0};
  const std::vector<ModelSequence> batch = {{longer, longer_slots, 300}, {other, other_slots, 0}};
  std::vector<float> logits[2];
  for (GpuModel* gpu : {&fused, &plain}) {
    ASSERT_TRUE(gpu->model->forward(*gpu->l1, std::span(&prefix, 1), LogitsWanted::kNone).is_ok());
    auto out = gpu->model->forward(*gpu->l1, batch, LogitsWanted::kAll);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    logits[gpu == &plain] = std::move(out->logits);
  }
  std::printf("batch of a cached prefix and a fresh prompt: relative error %.2e vs the unfused pass\n",
              relative_error(logits[0], logits[1]));
  EXPECT_LT(relative_error(logits[0], logits[1]), 1e-2);
}

TEST_F(GpuModelTest, BatchesSequencesWithDifferentCachedPrefixes) {
  const TinyModel::Spec spec = qwen3_like();
  GpuModel gpu(spec, 2048);
  ASSERT_TRUE(gpu.model && gpu.l1);
  // A fresh prompt, a prompt on a cached prefix, and two decode steps.
  struct Case {
    size_t length, first_new;
    SlotId first_slot;
  };
  const std::vector<Case> cases = {{70, 0, 0}, {150, 120, 100}, {500, 499, 300}, {33, 32, 900}};
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<SlotId>> slots;
  for (size_t i = 0; i < cases.size(); ++i) {
    tokens.push_back(random_tokens(cases[i].length, spec.vocab_size, 10 + static_cast<uint32_t>(i)));
    slots.push_back(iota_slots(cases[i].length, cases[i].first_slot));
    if (cases[i].first_new > 0) {  // its cached prefix
      const ModelSequence prefix{std::span(tokens[i]).first(cases[i].first_new),
                                 std::span(slots[i]).first(cases[i].first_new), 0};
      ASSERT_TRUE(gpu.model->forward(*gpu.l1, std::span(&prefix, 1), LogitsWanted::kNone).is_ok());
    }
  }
  std::vector<ModelSequence> batch;
  for (size_t i = 0; i < cases.size(); ++i) batch.push_back({tokens[i], slots[i], cases[i].first_new});
  auto together = gpu.model->forward(*gpu.l1, batch, LogitsWanted::kAll);
  ASSERT_TRUE(together.is_ok()) << together.status().to_string();
  size_t row = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    auto alone = gpu.model->forward(*gpu.l1, std::span(&batch[i], 1), LogitsWanted::kAll);
    ASSERT_TRUE(alone.is_ok());
    const size_t n_new = cases[i].length - cases[i].first_new;
    const double error =
        relative_error(logit_rows(together->logits, spec.vocab_size, row, row + n_new), alone->logits);
    std::printf("sequence %zu (%zu new on %zu cached): batched vs alone %.2e\n", i, n_new, cases[i].first_new, error);
    // Alone, a decode step runs at its graph bucket, whose context splits
    // differ from the batch's; each split rounds P to BF16 against its own
    // max, so the logits of this random model move by about 1e-2 (seen:
    // 1.03e-2 on the H200), as in the long-context test below.
    EXPECT_LT(error, n_new == 1 ? 2e-2 : 1e-2);
    row += n_new;
  }
  EXPECT_EQ(together->next_tokens.size(), cases.size());
}

// A pass that wants each sequence's last row computes the last layer past
// its attention on those rows alone (gathered): the logits are those of the
// pass that computes every row, up to the rounding of products of other
// sizes, sequence by sequence; a row gathered from the wrong place would be
// another token's logits, far off.
TEST_F(GpuModelTest, TheLastLayerOnTheWantedRowsAloneGivesEachSequencesLastLogits) {
  const TinyModel::Spec spec = qwen3_like();
  const auto vocab = static_cast<size_t>(spec.vocab_size);
  struct Case {
    size_t length, first_new;
    SlotId first_slot;
  };
  // Fresh prompts, one on a cached prefix, and a decode step among them.
  const std::vector<Case> cases = {{70, 0, 0}, {150, 120, 100}, {41, 40, 300}, {257, 0, 400}, {9, 0, 700}};
  GpuModel gpu(spec, 1024);
  ASSERT_TRUE(gpu.model && gpu.l1);
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<SlotId>> slots;
  std::vector<ModelSequence> batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    tokens.push_back(random_tokens(cases[i].length, spec.vocab_size, 40 + static_cast<uint32_t>(i)));
    slots.push_back(iota_slots(cases[i].length, cases[i].first_slot));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].first_new > 0) {
      const ModelSequence prefix{std::span(tokens[i]).first(cases[i].first_new),
                                 std::span(slots[i]).first(cases[i].first_new), 0};
      ASSERT_TRUE(gpu.model->forward(*gpu.l1, std::span(&prefix, 1), LogitsWanted::kNone).is_ok());
    }
    batch.push_back({tokens[i], slots[i], cases[i].first_new});
  }
  auto every = gpu.model->forward(*gpu.l1, batch, LogitsWanted::kAll);
  auto last = gpu.model->forward(*gpu.l1, batch, LogitsWanted::kLast);
  auto next = gpu.model->forward(*gpu.l1, batch, LogitsWanted::kNone);
  ASSERT_TRUE(every.is_ok() && last.is_ok() && next.is_ok()) << last.status().to_string();
  ASSERT_EQ(last->logits.size(), cases.size() * vocab);
  size_t row = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    row += cases[i].length - cases[i].first_new;
    const std::span<const float> wanted = std::span(last->logits).subspan(i * vocab, vocab);
    const double error = relative_error(wanted, logit_rows(every->logits, spec.vocab_size, row - 1, row));
    std::printf("sequence %zu: last row alone vs every row %.2e\n", i, error);
    EXPECT_LT(error, 1e-2);
    EXPECT_EQ(next->next_tokens[i], last->next_tokens[i]);
    EXPECT_EQ(last->next_tokens[i], std::max_element(wanted.begin(), wanted.end()) - wanted.begin());
  }
}

TEST_F(GpuModelTest, LongContextDecodeSplitsAttentionAndMatchesTheCpu) {
  const TinyModel::Spec spec = qwen3_like();
  GpuModel gpu(spec, 1600);
  ASSERT_TRUE(gpu.model && gpu.l1);
  const std::vector<int32_t> tokens = random_tokens(1500, spec.vocab_size, 7);
  const std::vector<SlotId> slots = iota_slots(tokens.size());
  const ModelSequence prefix{std::span(tokens).first(1499), std::span(slots).first(1499), 0};
  ASSERT_TRUE(gpu.model->forward(*gpu.l1, std::span(&prefix, 1), LogitsWanted::kNone).is_ok());
  const ModelSequence step{tokens, slots, 1499};
  auto out = gpu.model->forward(*gpu.l1, std::span(&step, 1), LogitsWanted::kLast);
  ASSERT_TRUE(out.is_ok());

  auto cpu_l1 = gpu.tiny.pool(1600);
  auto cpu = cpu_forward(gpu.tiny.shape, gpu.tiny.weights, *cpu_l1, tokens, slots, 0);
  ASSERT_TRUE(cpu.is_ok());
  const double error = relative_error(out->logits, *cpu);
  std::printf("decode at 1500 tokens of context, CUDA vs CPU: relative error %.2e\n", error);
  EXPECT_LT(error, 2e-2);
}

// A profiled pass (ForwardProfile) computes the same bits as a plain one and
// charges time to every component it has; a decode step's restore wait goes
// to "other".
TEST_F(GpuModelTest, AProfiledPassGivesTheSameLogitsAndTimesEachComponent) {
  const TinyModel::Spec spec = qwen3_like();
  GpuModel gpu(spec, 512);
  ASSERT_TRUE(gpu.model && gpu.l1);
  const std::vector<int32_t> tokens = random_tokens(300, spec.vocab_size, 5);
  const std::vector<SlotId> slots = iota_slots(tokens.size());
  const ModelSequence prompt{std::span(tokens).first(299), std::span(slots).first(299), 0};
  auto plain = gpu.model->forward(*gpu.l1, std::span(&prompt, 1), LogitsWanted::kLast);
  ForwardProfile profile;
  auto profiled = gpu.model->forward(*gpu.l1, std::span(&prompt, 1), LogitsWanted::kLast, nullptr, &profile);
  ASSERT_TRUE(plain.is_ok() && profiled.is_ok()) << profiled.status().to_string();
  EXPECT_EQ(profiled->logits, plain->logits);
  std::printf("299-token prefill: gemm %.3f ms, attention %.3f, norm+elementwise %.3f, LM head %.3f, other %.3f\n",
              profile.gemm_seconds * 1e3, profile.attention_seconds * 1e3, profile.norm_elementwise_seconds * 1e3,
              profile.lm_head_seconds * 1e3, profile.other_seconds * 1e3);
  EXPECT_GT(profile.gemm_seconds, 0);
  EXPECT_GT(profile.attention_seconds, 0);
  EXPECT_GT(profile.norm_elementwise_seconds, 0);
  EXPECT_GT(profile.lm_head_seconds, 0);
  EXPECT_GT(profile.other_seconds, 0);
  EXPECT_LT(profile.total_seconds(), 1.0);

  // A decode step whose hook holds the stream for a while: the wait is "other".
  const ModelSequence step{tokens, slots, 299};
  ForwardProfile decode;
  auto out = gpu.model->forward(*gpu.l1, std::span(&step, 1), LogitsWanted::kNone,
                                [](int layer, void*) {
                                  if (layer == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                  return Status::ok();
                                },
                                &decode);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  std::printf("decode step with a 20 ms hook: other %.3f ms of %.3f\n", decode.other_seconds * 1e3,
              decode.total_seconds() * 1e3);
  EXPECT_GT(decode.other_seconds, 0.015);  // the device idles while the host sleeps in the hook
  EXPECT_GT(decode.attention_seconds, 0);
  EXPECT_GT(decode.gemm_seconds, 0);
}

// Decode through CUDA graphs: the same model twice, graphs on and off, fed
// the same batch; each sequence has its own slots.
// Two models of one spec that must compute the same bits: `first` with the
// default options, `second` with `second_options` (by default, no graphs).
struct DecodeTwins {
  static constexpr size_t kStride = 1024;  // slots per sequence
  GpuModel first, second;
  std::vector<std::vector<int32_t>> tokens;
  DecodeTwins(const TinyModel::Spec& spec, int batch, const CudaModelOptions& second_options = eager_options())
      : first(spec, kStride * (static_cast<size_t>(batch) + 1)),
        second(spec, kStride * (static_cast<size_t>(batch) + 1), second_options) {}
  static CudaModelOptions eager_options() {
    CudaModelOptions o;
    o.cuda_graphs = false;
    return o;
  }
  std::vector<SlotId> slots_of(size_t b, size_t n) const { return iota_slots(n, static_cast<SlotId>(b * kStride)); }
  // Runs one pass of `batch` (first_new per sequence) on both models; the
  // results must be the same bits. Appends each next token.
  void step(const std::vector<size_t>& first_new, LogitsWanted logits, const BeforeLayerAttention& hook = nullptr) {
    std::vector<std::vector<SlotId>> slots;
    std::vector<ModelSequence> batch;
    for (size_t b = 0; b < tokens.size(); ++b) slots.push_back(slots_of(b, tokens[b].size()));
    for (size_t b = 0; b < tokens.size(); ++b) batch.push_back({tokens[b], slots[b], first_new[b]});
    auto a = first.model->forward(*first.l1, batch, logits, hook);
    auto b = second.model->forward(*second.l1, batch, logits);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    ASSERT_EQ(a->next_tokens, b->next_tokens);
    ASSERT_EQ(a->logits.size(), b->logits.size());
    ASSERT_EQ(std::memcmp(a->logits.data(), b->logits.data(), a->logits.size() * sizeof(float)), 0)
        << "the logits differ in their bits";
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i].push_back(a->next_tokens[i]);
  }
  void decode_step(LogitsWanted logits, const BeforeLayerAttention& hook = nullptr) {
    std::vector<size_t> first_new;
    for (const auto& t : tokens) first_new.push_back(t.size() - 1);
    step(first_new, logits, hook);
  }
};

// Decode steps replayed from CUDA graphs give the very bits of the same steps
// launched kernel by kernel: batches in different buckets, some smaller than
// their bucket (3 runs as 4, 13 as 16), contexts that cross a context bucket
// (256 → 512) on the way, with and without logits.
TEST_F(GpuModelTest, DecodeThroughCudaGraphsGivesTheBitsOfKernelByKernel) {
  const TinyModel::Spec spec = qwen3_like();
  for (int batch : {1, 3, 8, 13, 24}) {
    SCOPED_TRACE(batch);
    DecodeTwins twins(spec, batch);
    ASSERT_TRUE(twins.first.model && twins.second.model && twins.first.l1 && twins.second.l1);
    for (int b = 0; b < batch; ++b)  // prompts of 247 … 250 tokens
      twins.tokens.push_back(random_tokens(250 - b % 4, spec.vocab_size, 40 + static_cast<uint32_t>(b)));
    twins.step(std::vector<size_t>(static_cast<size_t>(batch), 0), LogitsWanted::kNone);  // the prefill
    for (int i = 0; i < 14; ++i) {
      SCOPED_TRACE(i);
      twins.decode_step(i % 3 == 2 ? LogitsWanted::kNone : LogitsWanted::kLast);
      if (HasFatalFailure()) return;
    }
    EXPECT_GT(twins.tokens[0].size(), 256u + 1) << "the contexts crossed the 256-token bucket";
    const CudaGraphStats with = twins.first.model->graph_stats(), without = twins.second.model->graph_stats();
    std::printf("batch %d: %llu graphs captured, %llu steps replayed, %llu dropped\n", batch,
                static_cast<unsigned long long>(with.captured), static_cast<unsigned long long>(with.replayed),
                static_cast<unsigned long long>(with.dropped));
    EXPECT_GE(with.captured, 2u) << "one graph per context bucket";
    EXPECT_GE(with.replayed, 10u);
    EXPECT_EQ(with.capture_failures, 0u);
    EXPECT_EQ(without.captured + without.replayed, 0u);
  }
}

// A decode step of ≤ 8 rows runs its norms, residual adds and SiLU gate
// inside its matrix products; every product of this model is small enough
// that the unfused step runs it on the same skinny kernel, so fusing must not
// change a bit: batches 1 to 8 fused, 9 past the fused size, both through
// graphs and kernel by kernel.
TEST_F(GpuModelTest, FusedDecodeStepsGiveTheBitsOfTheUnfusedKernels) {
  const TinyModel::Spec spec = qwen3_like();
  for (bool graphs : {true, false}) {
    for (int batch : {1, 5, 8, 9}) {
      SCOPED_TRACE(::testing::Message() << "batch " << batch << (graphs ? ", graphs" : ", kernel by kernel"));
      CudaModelOptions fused;
      fused.fused_decode = true;
      fused.cuda_graphs = graphs;
      DecodeTwins twins(spec, batch, fused);
      ASSERT_TRUE(twins.first.model && twins.second.model && twins.first.l1 && twins.second.l1);
      if (!graphs) twins.first.model->set_cuda_graphs(false);
      for (int b = 0; b < batch; ++b)
        twins.tokens.push_back(random_tokens(120 + 7 * b, spec.vocab_size, 60 + static_cast<uint32_t>(b)));
      twins.step(std::vector<size_t>(static_cast<size_t>(batch), 0), LogitsWanted::kNone);  // the prefill
      for (int i = 0; i < 6; ++i) {
        twins.decode_step(i % 2 == 0 ? LogitsWanted::kLast : LogitsWanted::kNone);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A decode step after a larger pass has grown the scratch memory (so the
// graphs' addresses are stale) is captured again and still gives the bits of
// kernel by kernel; so does a step with a before_attention hook, which runs
// kernel by kernel and calls the hook for every layer.
TEST_F(GpuModelTest, DecodeGraphsAreCapturedAgainAfterTheScratchGrows) {
  const TinyModel::Spec spec = qwen3_like();
  DecodeTwins twins(spec, 5);
  ASSERT_TRUE(twins.first.model && twins.second.model && twins.first.l1 && twins.second.l1);
  for (int b = 0; b < 4; ++b)
    twins.tokens.push_back(random_tokens(60, spec.vocab_size, 70 + static_cast<uint32_t>(b)));
  twins.step(std::vector<size_t>(4, 0), LogitsWanted::kNone);
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(twins.decode_step(LogitsWanted::kLast));
  const CudaGraphStats before = twins.first.model->graph_stats();
  ASSERT_GE(before.replayed, 2u);

  // A fifth sequence with a 900-token prompt, prefilled next to a step of
  // the four decoding ones: every activation buffer grows. Then the four
  // decode on in the same bucket as before.
  const size_t workspace = twins.first.model->workspace_bytes();
  twins.tokens.push_back(random_tokens(900, spec.vocab_size, 80));
  ASSERT_NO_FATAL_FAILURE(twins.step({twins.tokens[0].size() - 1, twins.tokens[1].size() - 1,
                                      twins.tokens[2].size() - 1, twins.tokens[3].size() - 1, 0},
                                     LogitsWanted::kLast));
  EXPECT_GT(twins.first.model->workspace_bytes(), workspace);
  twins.tokens.pop_back();
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(twins.decode_step(LogitsWanted::kLast));
  const CudaGraphStats after = twins.first.model->graph_stats();
  EXPECT_GE(after.dropped, before.dropped + 1) << "the stale graphs were destroyed";
  EXPECT_GT(after.captured, before.captured) << "and the bucket was captured again";
  EXPECT_GE(after.replayed, before.replayed + 2);

  int calls = 0;
  ASSERT_NO_FATAL_FAILURE(twins.decode_step(LogitsWanted::kLast, [&](int, void*) {
    ++calls;
    return Status::ok();
  }));
  EXPECT_EQ(calls, spec.num_layers);
  EXPECT_EQ(twins.first.model->graph_stats().replayed, after.replayed) << "a step with a hook is not replayed";
  EXPECT_EQ(twins.first.model->graph_stats().capture_failures, 0u);
}

TEST_F(GpuModelTest, ReadsAPrefixRestoredFromL2ThroughEachCodec) {
  const TinyModel::Spec spec = qwen3_like();
  const size_t prefix = 128, length = 200;
  for (CodecKind codec : {CodecKind::kBf16, CodecKind::kInt8, CodecKind::kFp8, CodecKind::kInt4, CodecKind::kInt4H}) {
    SCOPED_TRACE(codec_name(codec));
    GpuModel gpu(spec, 512);
    ASSERT_TRUE(gpu.model && gpu.l1);
    HostKvPoolOptions o;
    o.codec = codec;
    auto l2 = HostKvPool::create(gpu.l1->geometry(), o, 512);
    ASSERT_TRUE(l2.is_ok()) << l2.status().to_string();
    auto engine = make_cuda_transfer_engine(*gpu.l1, **l2);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();

    const std::vector<int32_t> tokens = random_tokens(length, spec.vocab_size, 3);
    const std::vector<SlotId> first_slots = iota_slots(length);
    const ModelSequence whole{tokens, first_slots, 0};
    auto reference = gpu.model->forward(*gpu.l1, std::span(&whole, 1), LogitsWanted::kAll);
    ASSERT_TRUE(reference.is_ok());

    // Back the prefix up, then restore it into other slots and run the rest on it.
    const std::vector<SlotId> l2_slots = iota_slots(prefix, 7);
    auto backup = (*engine)->backup(std::span(first_slots).first(prefix), l2_slots);
    ASSERT_TRUE(backup.is_ok());
    ASSERT_TRUE((*engine)->wait(*backup).is_ok());
    std::vector<SlotId> slots = iota_slots(prefix, 300);
    slots.insert(slots.end(), first_slots.begin() + prefix, first_slots.end());
    auto load = (*engine)->load(l2_slots, std::span(slots).first(prefix));
    ASSERT_TRUE(load.is_ok());
    const ModelSequence rest{tokens, slots, prefix};
    int waits = 0;
    auto restored = gpu.model->forward(*gpu.l1, std::span(&rest, 1), LogitsWanted::kAll,
                                       [&](int layer, void* stream) {
                                         ++waits;
                                         return (*engine)->stream_wait_layer(*load, layer, stream);
                                       });
    ASSERT_TRUE(restored.is_ok()) << restored.status().to_string();
    ASSERT_TRUE((*engine)->wait(*load).is_ok());
    EXPECT_EQ(waits, spec.num_layers);
    const double error =
        relative_error(restored->logits, logit_rows(reference->logits, spec.vocab_size, prefix, length));
    std::printf("%s: rest of the prompt on the restored prefix vs recomputed: relative error %.2e\n",
                std::string(codec_name(codec)).c_str(), error);
    // bf16 restores the very bits; the codecs' error follows their precision.
    const double bound = codec == CodecKind::kBf16 ? 1e-2
                         : codec == CodecKind::kInt8 ? 3e-2
                         : codec == CodecKind::kFp8 ? 8e-2
                                                    : 2.5e-1;
    EXPECT_LT(error, bound);
  }
}

TEST_F(GpuModelTest, RejectsBadInputWithoutCrashing) {
  TinyModel::Spec tiny;
  tiny.bf16_values = true;
  GpuModel gpu(tiny, 64);
  ASSERT_TRUE(gpu.model && gpu.l1);
  const std::vector<int32_t> tokens = {1, 2, 3};
  const std::vector<SlotId> slots = {0, 1, 2};
  auto host_l1 = gpu.tiny.pool(64);
  const ModelSequence ok{tokens, slots, 0};
  EXPECT_EQ(gpu.model->forward(*host_l1, std::span(&ok, 1), LogitsWanted::kNone).status().code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad_tokens = {1, 97, 3};
  const ModelSequence bad_token{bad_tokens, slots, 0};
  EXPECT_EQ(gpu.model->forward(*gpu.l1, std::span(&bad_token, 1), LogitsWanted::kNone).status().code(),
            StatusCode::kOutOfRange);
  const std::vector<SlotId> bad_slots = {0, 64, 2};
  const ModelSequence bad_slot{tokens, bad_slots, 0};
  EXPECT_EQ(gpu.model->forward(*gpu.l1, std::span(&bad_slot, 1), LogitsWanted::kNone).status().code(),
            StatusCode::kOutOfRange);
  const ModelSequence nothing_new{tokens, slots, 3};
  EXPECT_EQ(gpu.model->forward(*gpu.l1, std::span(&nothing_new, 1), LogitsWanted::kNone).status().code(),
            StatusCode::kInvalidArgument);
  auto failed = gpu.model->forward(*gpu.l1, std::span(&ok, 1), LogitsWanted::kNone,
                                   [](int layer, void*) { return layer == 1 ? data_loss("restore failed") : Status::ok(); });
  EXPECT_EQ(failed.status().code(), StatusCode::kDataLoss);
  // The model still works afterwards.
  auto again = gpu.model->forward(*gpu.l1, std::span(&ok, 1), LogitsWanted::kLast);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->logits.size(), 97u);
}

// Log-probabilities through CudaModelRunner in a mixed batch — an item that
// wants its prompt's (a pass of its own, every logit row), one that wants its
// next token's with alternatives, one greedy — equal the CPU runner's on the
// same weights, and the greedy items' tokens are unchanged by the split.
TEST_F(GpuModelTest, LogprobsOfAMixedBatchMatchTheCpuRunner) {
  const TinyModel::Spec spec = qwen3_like();
  GpuModel gpu(spec, 512);
  ASSERT_TRUE(gpu.model && gpu.l1);
  CudaModelRunner runner(*gpu.model, *gpu.l1, nullptr);
  auto cpu_l1 = gpu.tiny.pool(512);
  CpuModelRunner cpu(gpu.tiny.shape, gpu.tiny.weights, *cpu_l1, nullptr);

  const std::vector<int32_t> a = random_tokens(60, spec.vocab_size, 11), b = random_tokens(40, spec.vocab_size, 12),
                             c = random_tokens(25, spec.vocab_size, 13);
  const std::vector<SlotId> sa = iota_slots(a.size(), 0), sb = iota_slots(b.size(), 100), sc = iota_slots(c.size(), 200);
  std::vector<ForwardItem> batch(3);
  batch[0].tokens = a, batch[0].slots = sa, batch[0].logprobs = 2, batch[0].prompt_logprobs = true;
  batch[1].tokens = b, batch[1].slots = sb, batch[1].logprobs = 5;
  batch[2].tokens = c, batch[2].slots = sc;
  auto got = runner.forward(batch);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  auto want = cpu.forward(batch);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  ASSERT_EQ(got->size(), 3u);
  // Greedy takes the most likely token, whichever pass an item ran in.
  for (size_t i : {size_t{0}, size_t{1}}) {
    ASSERT_TRUE((*got)[i].logprobs.has_value()) << "item " << i;
    EXPECT_EQ((*got)[i].logprobs->top.at(0).first, (*got)[i].next) << "item " << i;
  }
  auto alone = runner.forward(std::span(batch).subspan(2, 1));
  ASSERT_TRUE(alone.is_ok());
  EXPECT_EQ((*alone)[0].next, (*got)[2].next) << "the greedy item is unchanged by the split";
  ASSERT_EQ((*got)[0].prompt_logprobs.size(), a.size() - 1);
  double worst = 0;
  for (size_t t = 0; t < a.size() - 1; ++t) {
    const TokenLogprobs& g = (*got)[0].prompt_logprobs[t];
    const TokenLogprobs& w = (*want)[0].prompt_logprobs[t];
    EXPECT_EQ(g.token, a[t + 1]);
    worst = std::max(worst, static_cast<double>(std::abs(g.logprob - w.logprob)));
    ASSERT_EQ(g.top.size(), 2u);
  }
  std::printf("prompt log-probabilities, CUDA vs CPU: largest difference %.2e\n", worst);
  EXPECT_LT(worst, 5e-2);
  for (size_t i : {size_t{0}, size_t{1}}) {
    ASSERT_TRUE((*got)[i].logprobs.has_value() && (*want)[i].logprobs.has_value());
    EXPECT_NEAR((*got)[i].logprobs->logprob, (*want)[i].logprobs->logprob, 5e-2);
    EXPECT_EQ((*got)[i].logprobs->top.size(), static_cast<size_t>(batch[i].logprobs));
  }
  EXPECT_FALSE((*got)[2].logprobs.has_value());
  EXPECT_TRUE((*got)[2].prompt_logprobs.empty());
}

// The model behind the scheduler and the hierarchical cache on the GPU: the
// groups of a shared-prefix workload, then the same groups again, so that the
// second pass restores its prefixes from L2 (BF16) while the forward pass
// waits on the restore layer by layer. Every request generates what the model
// generates alone from scratch.
TEST_F(GpuModelTest, ServesRequestsWithRestoresThroughTheScheduler) {
  TinyModel::Spec spec;
  spec.bf16_values = true;
  GpuModel gpu(spec, 160);
  ASSERT_TRUE(gpu.model && gpu.l1);
  HostKvPoolOptions ho;
  ho.codec = CodecKind::kBf16;
  ho.ratio = 4;
  auto l2 = HostKvPool::create(gpu.l1->geometry(), ho, gpu.l1->num_slots());
  ASSERT_TRUE(l2.is_ok());
  auto engine = make_cuda_transfer_engine(*gpu.l1, **l2);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  CudaModelRunner runner(*gpu.model, *gpu.l1, engine->get());

  std::vector<RequestResult> results;
  RadixCacheStats stats;
  {
    RadixCache cache(*gpu.l1, l2->get(), engine->get());
    Scheduler scheduler(cache, *gpu.l1, engine->get(), runner);
    uint64_t id = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (int g = 0; g < 6; ++g)
        for (int p = 0; p < 3; ++p) {
          Request r;
          r.id = id++;
          r.group = g;
          for (int i = 0; i < 40; ++i) r.prompt.push_back(static_cast<TokenId>((g * 31 + i * 7) % 97));
          for (int i = 0; i < 6; ++i) r.prompt.push_back(static_cast<TokenId>((p * 13 + i * 5 + pass * 29 + 50) % 97));
          r.max_new_tokens = 4;
          scheduler.submit(std::move(r), runner.now());
          while (true) {  // one request at a time: L1 evicts between groups
            auto busy = scheduler.step();
            ASSERT_TRUE(busy.is_ok()) << busy.status().to_string();
            cache.drain_transfers();
            if (!*busy) break;
          }
          for (RequestResult& res : scheduler.take_finished()) results.push_back(std::move(res));
        }
    stats = cache.stats();
  }
  ASSERT_EQ(results.size(), 36u);
  auto alone_l1 = make_cuda_device_kv_pool(gpu.l1->geometry(), 64);
  ASSERT_TRUE(alone_l1.is_ok());
  size_t restored = 0;
  for (const RequestResult& r : results) {
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.output, greedy(*gpu.model, **alone_l1, r.request.prompt, 4)) << "request " << r.id;
    restored += r.cached_l2_tokens;
  }
  EXPECT_GT(restored, 0u) << "the second pass must restore prefixes from L2";
  EXPECT_GT(stats.hit_tokens_l1, 0u);
}

}  // namespace
}  // namespace hiq
