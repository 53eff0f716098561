// The serving engine on the CPU backend (a tiny random Qwen3, an L1 pool in
// host memory, a BF16 L2): concurrent clients each stream exactly their own
// greedy tokens; stop tokens, cancellation and seeded sampling behave; a
// failing model fails its batch and the engine goes on; flush_cache and stop
// leave no slot behind; bad requests are refused.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "engine/cpu_model_runner.h"
#include "engine/serving_engine.h"
#include "model/cpu_forward.h"
#include "memory/host_kv_pool.h"
#include "tiny_model.h"
#include "transfer/transfer_engine.h"

namespace hiq {
namespace {

using testing::TinyModel;
using namespace std::chrono_literals;


std::vector<TokenId> prompt_of(int group, int variant) {
  std::vector<TokenId> p;
  for (int i = 0; i < 24; ++i) p.push_back(static_cast<TokenId>((group * 31 + i * 7) % 97));
  for (int i = 0; i < 5; ++i) p.push_back(static_cast<TokenId>((variant * 13 + i * 5 + 50) % 97));
  return p;
}

// Reads a stream to its end: the tokens as they came, and the result.
struct Read {
  std::vector<TokenId> tokens;
  RequestResult result;
  bool finished = false;
};
Read read_all(GenerationStream& s) {
  Read r;
  while (auto event = s.next(30s)) {
    if (event->kind == GenerationEvent::Kind::kToken) {
      r.tokens.push_back(event->token);
      continue;
    }
    r.result = std::move(event->result);
    r.finished = true;
    break;
  }
  return r;
}

// The engine's runner, under the test's control: it fails on request (to
// stand for a broken GPU call), and it can be held, so that what a test does
// between two engine steps happens there — not a race against the engine
// thread (a cancel must not find a request already finished).
class ControlledRunner final : public ModelRunner {
 public:
  explicit ControlledRunner(ModelRunner& inner) : inner_(inner) {}
  Result<std::vector<ForwardResult>> forward(std::span<const ForwardItem> batch) override {
    {
      std::unique_lock lock(mutex_);
      ++waiting_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return passes_left_ != 0; });
      --waiting_;
      if (passes_left_ > 0) --passes_left_;
    }
    if (fail_.exchange(false)) return internal_error("injected model failure");
    return inner_.forward(batch);
  }
  double now() const override { return inner_.now(); }
  void advance_to(double t) override { inner_.advance_to(t); }

  // From now on, `passes` more forward passes run, then forward() waits (-1: no limit).
  void allow(int passes) {
    std::lock_guard lock(mutex_);
    passes_left_ = passes;
    changed_.notify_all();
  }
  // Waits until the engine thread is held in forward().
  void wait_until_held() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return waiting_ > 0 && passes_left_ == 0; });
  }
  std::atomic<bool> fail_{false};

 private:
  ModelRunner& inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int passes_left_ = -1;
  int waiting_ = 0;
};

class ServingEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    l1_ = model_.pool(128);
    HostKvPoolOptions o;
    o.codec = CodecKind::kBf16;
    o.ratio = 4;
    l2_ = std::move(*HostKvPool::create(l1_->geometry(), o, l1_->num_slots()));
    transfer_ = std::move(*make_cpu_transfer_engine(*l1_, *l2_));
    runner_ = std::make_unique<CpuModelRunner>(model_.shape, model_.weights, *l1_, transfer_.get());
    runner_control_ = std::make_unique<ControlledRunner>(*runner_);
    cache_ = std::make_unique<RadixCache>(*l1_, l2_.get(), transfer_.get());
    engine_ = std::make_unique<ServingEngine>(*cache_, *l1_, transfer_.get(), *runner_control_);
  }
  void TearDown() override {
    engine_.reset();
    cache_.reset();
  }
  Request request(std::vector<TokenId> prompt, int max_new_tokens) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new_tokens;
    return r;
  }

  TinyModel model_;
  std::unique_ptr<DeviceKvPool> l1_;
  std::unique_ptr<HostKvPool> l2_;
  std::unique_ptr<TransferEngine> transfer_;
  std::unique_ptr<CpuModelRunner> runner_;
  std::unique_ptr<ControlledRunner> runner_control_;
  std::unique_ptr<RadixCache> cache_;
  std::unique_ptr<ServingEngine> engine_;
};

TEST_F(ServingEngineTest, ConcurrentClientsStreamExactlyTheirOwnGreedyTokens) {
  constexpr int kClients = 4, kEach = 5, kNew = 6;
  std::vector<std::vector<Read>> reads(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < kEach; ++i) {
        auto stream = engine_->submit(request(prompt_of(i % 3, c), kNew));
        ASSERT_TRUE(stream.is_ok());
        reads[static_cast<size_t>(c)].push_back(read_all(**stream));
      }
    });
  for (auto& t : clients) t.join();
  size_t l1_hits = 0;
  for (int c = 0; c < kClients; ++c)
    for (int i = 0; i < kEach; ++i) {
      const Read& r = reads[static_cast<size_t>(c)][static_cast<size_t>(i)];
      ASSERT_TRUE(r.finished);
      ASSERT_TRUE(r.result.status.is_ok()) << r.result.status.to_string();
      EXPECT_EQ(r.result.finish_reason, FinishReason::kLength);
      EXPECT_EQ(r.tokens, r.result.output);
      EXPECT_EQ(r.tokens, model_.generate_alone(prompt_of(i % 3, c), kNew)) << "client " << c << " request " << i;
      EXPECT_LE(r.result.arrival, r.result.admitted);
      EXPECT_LT(r.result.admitted, r.result.first_token);
      l1_hits += r.result.cached_l1_tokens;
    }
  EXPECT_GT(l1_hits, 0u) << "clients share prefixes";
  const ServingStats stats = engine_->stats();
  EXPECT_EQ(stats.finished, static_cast<uint64_t>(kClients * kEach));
  EXPECT_EQ(stats.generated_tokens, static_cast<uint64_t>(kClients * kEach * kNew));
  EXPECT_EQ(stats.scheduler.admitted, static_cast<uint64_t>(kClients * kEach));
  EXPECT_GE(stats.scheduler.prefill_steps, static_cast<uint64_t>(kEach));  // a client's requests come one at a time
  EXPECT_LE(stats.scheduler.prefill_steps, static_cast<uint64_t>(kClients * kEach));
  EXPECT_GE(stats.scheduler.decode_steps, static_cast<uint64_t>(kEach * (kNew - 1)));
  EXPECT_GT(stats.scheduler.prefill_seconds, 0.0);
}

// n choices on one stream: each choice's events in order, each its own
// request; greedy choices agree, and the later ones reuse the first's prefix.
TEST_F(ServingEngineTest, SeveralChoicesShareOneStream) {
  const auto prompt = prompt_of(0, 3);
  std::vector<Request> choices(3, request(prompt, 5));
  auto stream = engine_->submit(choices);
  ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
  EXPECT_EQ((*stream)->choices(), 3u);
  std::vector<std::vector<TokenId>> tokens(3);
  std::vector<RequestResult> results(3);
  size_t open = 3;
  while (open > 0) {
    auto event = (*stream)->next(30s);
    ASSERT_TRUE(event.has_value());
    ASSERT_LT(event->choice, 3u);
    if (event->kind == GenerationEvent::Kind::kToken) {
      tokens[event->choice].push_back(event->token);
      continue;
    }
    results[event->choice] = std::move(event->result);
    --open;
  }
  const auto alone = model_.generate_alone(prompt, 5);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(tokens[i], alone) << "choice " << i;
    EXPECT_EQ(results[i].output, alone);
    EXPECT_EQ(results[i].id, (*stream)->ids()[i]);
  }
  EXPECT_FALSE(engine_->submit(std::vector<Request>{}).is_ok());
  std::vector<Request> bad(2, request(prompt, 5));
  bad[1].logprobs = kMaxTopLogprobs + 1;
  EXPECT_FALSE(engine_->submit(bad).is_ok()) << "all or none";
  EXPECT_EQ(engine_->stats().submitted, 3u);
}

// Log-probabilities are those of the model's logits: of each generated token
// (greedy: the best of the alternatives), and of the prompt, computed whole.
TEST_F(ServingEngineTest, LogprobsAreTheModelsOwn) {
  const auto prompt = prompt_of(1, 2);
  // Cache the prompt first: prompt log-probabilities must still come from a full computation.
  ASSERT_TRUE(read_all(**engine_->submit(request(prompt, 2))).finished);
  Request r = request(prompt, 4);
  r.logprobs = 3;
  r.prompt_logprobs = true;
  auto stream = engine_->submit(std::move(r));
  ASSERT_TRUE(stream.is_ok());
  std::vector<GenerationEvent> events;
  while (auto event = (*stream)->next(30s)) {
    const bool done = event->kind == GenerationEvent::Kind::kFinished;
    events.push_back(std::move(*event));
    if (done) break;
  }
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events.back().result.cached_l1_tokens + events.back().result.cached_l2_tokens, 0u);
  // The reference: every row of logits of the prompt and its greedy continuation, computed alone.
  std::vector<int32_t> sequence = prompt;
  for (size_t i = 0; i < 4; ++i) sequence.push_back(events[i].token);
  auto l1 = model_.pool(sequence.size());
  std::vector<SlotId> slots(sequence.size());
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<SlotId>(i);
  auto logits = cpu_forward(model_.shape, model_.weights, *l1, sequence, slots, 0, /*all_logits=*/true);
  ASSERT_TRUE(logits.is_ok());
  const auto vocab = static_cast<size_t>(model_.shape.vocab_size);
  const auto row = [&](size_t position) { return std::span<const float>(*logits).subspan(position * vocab, vocab); };
  ASSERT_EQ(events[0].prompt_logprobs.size(), prompt.size() - 1);
  for (size_t t = 1; t < prompt.size(); ++t) {
    const TokenLogprobs want = token_logprobs(row(t - 1), prompt[t], 3);
    const TokenLogprobs& got = events[0].prompt_logprobs[t - 1];
    EXPECT_EQ(got.token, prompt[t]);
    EXPECT_NEAR(got.logprob, want.logprob, 1e-4) << "prompt position " << t;
    ASSERT_EQ(got.top.size(), 3u);
    EXPECT_EQ(got.top[0].first, want.top[0].first);
  }
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(events[i].logprobs.has_value());
    const TokenLogprobs want = token_logprobs(row(prompt.size() - 1 + i), events[i].token, 3);
    EXPECT_EQ(events[i].logprobs->token, events[i].token);
    EXPECT_NEAR(events[i].logprobs->logprob, want.logprob, 1e-4) << "output " << i;
    EXPECT_EQ(events[i].logprobs->top[0].first, events[i].token) << "greedy takes the most likely";
    if (i > 0) {
      EXPECT_TRUE(events[i].prompt_logprobs.empty());
    }
  }
}

// --max-queued-requests: with the engine held in a forward pass, what waits
// is exactly what was submitted after it; one more than the bound is refused.
TEST_F(ServingEngineTest, AFullQueueRefusesNewRequests) {
  engine_.reset();
  SchedulerOptions options;
  options.max_queued_requests = 2;
  engine_ = std::make_unique<ServingEngine>(*cache_, *l1_, transfer_.get(), *runner_control_, options);
  runner_control_->allow(1);
  auto running = engine_->submit(request(prompt_of(0, 1), 3));
  ASSERT_TRUE(running.is_ok());
  ASSERT_TRUE((*running)->next(30s).has_value());
  runner_control_->wait_until_held();  // prefilled, held before its first decode step: it no longer waits
  auto second = engine_->submit(request(prompt_of(1, 1), 3));
  auto third = engine_->submit(request(prompt_of(2, 1), 3));
  ASSERT_TRUE(second.is_ok() && third.is_ok());
  auto refused = engine_->submit(request(prompt_of(0, 2), 3));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("the queue is full (2 requests waiting, the bound is 2)"),
            std::string::npos) << refused.status().message();
  std::vector<Request> two(2, request(prompt_of(0, 2), 3));
  EXPECT_FALSE(engine_->submit(two).is_ok()) << "n choices count as n requests";
  EXPECT_EQ(engine_->stats().rejected_queue_full, 2u);
  // More choices than the bound can never be queued: refused as a bad 'n', not "retry later".
  std::vector<Request> three(3, request(prompt_of(0, 2), 3));
  auto never = engine_->submit(three);
  ASSERT_FALSE(never.is_ok());
  EXPECT_EQ(never.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(never.status().message().rfind("parameter 'n': ", 0), 0u) << never.status().message();
  EXPECT_EQ(engine_->stats().rejected_queue_full, 2u);
  runner_control_->allow(-1);
  for (auto* s : {&running, &second, &third}) EXPECT_EQ(read_all(***s).result.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(engine_->submit(request(prompt_of(0, 2), 3)).is_ok()) << "room again";
}

// Stopping backs up nothing new: KV that finished requests leave in the tree stays device-only.
TEST_F(ServingEngineTest, StoppingBacksUpNothingNew) {
  const auto prompt = prompt_of(1, 3);
  runner_control_->allow(1);
  auto stream = engine_->submit(request(prompt, 50));
  ASSERT_TRUE(stream.is_ok());
  ASSERT_TRUE((*stream)->next(30s).has_value());
  runner_control_->wait_until_held();
  std::thread stopper([&] { engine_->stop(); });
  while (!engine_->stopping()) std::this_thread::yield();
  runner_control_->allow(-1);
  stopper.join();
  const Read read = read_all(**stream);
  EXPECT_EQ(read.result.finish_reason, FinishReason::kCancelled);
  ASSERT_EQ(read.result.output.size(), 2u);  // the held decode step ran
  cache_->drain_transfers();
  // Write-through backed up the prompt when it was inserted, before the stop;
  // the token inserted when the cancelled request finished stays device-only.
  EXPECT_EQ(cache_->stats().backup_tokens, prompt.size());
}

TEST_F(ServingEngineTest, AStopTokenEndsTheRequest) {
  const auto prompt = prompt_of(1, 1);
  const auto alone = model_.generate_alone(prompt, 6);
  Request r = request(prompt, 6);
  r.stop_token_ids = {alone[2]};
  auto stream = engine_->submit(std::move(r));
  ASSERT_TRUE(stream.is_ok());
  const Read read = read_all(**stream);
  ASSERT_TRUE(read.finished);
  EXPECT_EQ(read.result.finish_reason, FinishReason::kStop);
  // The first occurrence of the stop token ends it (it may come earlier than step 2).
  const auto first = std::find(alone.begin(), alone.end(), alone[2]);
  EXPECT_EQ(read.tokens, std::vector<TokenId>(alone.begin(), first + 1));
}

TEST_F(ServingEngineTest, CancellingARunningRequestEndsItAndKeepsNoSlot) {
  runner_control_->allow(1);  // the prefill, then the engine is held before its first decode step
  auto stream = engine_->submit(request(prompt_of(2, 0), 90));
  ASSERT_TRUE(stream.is_ok());
  auto first = (*stream)->next(30s);
  ASSERT_TRUE(first && first->kind == GenerationEvent::Kind::kToken);
  runner_control_->wait_until_held();
  engine_->cancel((*stream)->id());
  runner_control_->allow(-1);  // the held step runs; the next one sees the cancel
  const Read rest = read_all(**stream);
  ASSERT_TRUE(rest.finished);
  EXPECT_EQ(rest.result.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(rest.result.output.size(), 2u);
  EXPECT_EQ(engine_->stats().cancelled, 1u);
  ASSERT_TRUE(engine_->flush_cache().is_ok());
  EXPECT_EQ(engine_->stats().l1_free_slots, l1_->num_slots());
}

// Flushes that arrive together (several HTTP workers) each get their answer:
// they used to share one result slot, so a waiter could miss its wake-up and
// block its worker for good.
TEST_F(ServingEngineTest, ConcurrentFlushesAreEachAnswered) {
  // A flush left unanswered fails the test instead of hanging it: stopping
  // the engine answers every waiter, so the futures below can be destroyed.
  const auto answered = [&](std::future<Status>& f) {
    if (f.wait_for(60s) == std::future_status::ready) return true;
    engine_->stop();
    return false;
  };
  for (int round = 0; round < 25; ++round) {
    std::vector<std::future<Status>> flushes;
    for (int i = 0; i < 8; ++i)
      flushes.push_back(std::async(std::launch::async, [&] { return engine_->flush_cache(); }));
    for (auto& f : flushes) {
      ASSERT_TRUE(answered(f)) << "round " << round;
      EXPECT_TRUE(f.get().is_ok());
    }
  }
  // While a request runs, every waiting flush is refused, and none is lost.
  runner_control_->allow(1);  // the prefill, then the engine is held
  auto stream = engine_->submit(request(prompt_of(2, 0), 4));
  ASSERT_TRUE(stream.is_ok());
  runner_control_->wait_until_held();
  std::vector<std::future<Status>> refused;
  for (int i = 0; i < 4; ++i)
    refused.push_back(std::async(std::launch::async, [&] { return engine_->flush_cache(); }));
  runner_control_->allow(-1);
  for (auto& f : refused) {
    ASSERT_TRUE(answered(f));
    const Status status = f.get();
    // A flush the engine takes after the request has ended succeeds.
    EXPECT_TRUE(status.is_ok() || status.code() == StatusCode::kFailedPrecondition) << status.to_string();
  }
  ASSERT_TRUE(read_all(**stream).finished);
  EXPECT_TRUE(engine_->flush_cache().is_ok());
}

TEST_F(ServingEngineTest, SeededSamplingIsReproducible) {
  const auto sampled = [&](uint64_t seed) {
    Request r = request(prompt_of(0, 3), 8);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    auto stream = engine_->submit(std::move(r));
    EXPECT_TRUE(stream.is_ok());
    return read_all(**stream).tokens;
  };
  const auto a = sampled(5), b = sampled(5), c = sampled(6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, model_.generate_alone(prompt_of(0, 3), 8)) << "temperature 1 should not be greedy here";
}

// A prompt prefilled in chunks (8 tokens a step here) gives the tokens a
// whole prefill gives: greedy, and seeded sampling too (a chunk's dropped
// next token draws nothing from the request's random stream).
TEST_F(ServingEngineTest, ChunkedPrefillGivesTheSameTokens) {
  std::vector<TokenId> prompt;
  for (int i = 0; i < 61; ++i) prompt.push_back(static_cast<TokenId>((i * 11 + 3) % 97));
  const auto run = [&](size_t chunk, bool sampled) {
    SchedulerOptions o;
    o.chunked_prefill_size = chunk;
    auto l1 = model_.pool(128);
    RadixCache cache(*l1, nullptr, nullptr);
    CpuModelRunner runner(model_.shape, model_.weights, *l1, nullptr);
    ServingEngine engine(cache, *l1, nullptr, runner, o);
    Request r = request(prompt, 6);
    if (sampled) {
      r.sampling.temperature = 1.0f;
      r.sampling.seed = 9;
    }
    auto stream = engine.submit(std::move(r));
    EXPECT_TRUE(stream.is_ok());
    const Read read = read_all(**stream);
    EXPECT_TRUE(read.result.status.is_ok()) << read.result.status.to_string();
    EXPECT_EQ(engine.stats().scheduler.prefill_chunks, chunk == 0 ? 0u : 7u);  // 60 tokens: 7 chunks of 8, then 4
    return read.tokens;
  };
  EXPECT_EQ(run(8, false), model_.generate_alone(prompt, 6));
  EXPECT_EQ(run(0, false), model_.generate_alone(prompt, 6));
  EXPECT_EQ(run(8, true), run(0, true));
}

// Over-commit on the real (CPU) model: requests whose outputs together
// outgrow L1 are admitted together, decode runs out of slots, and requests
// are retracted and resume from their cached KV. Each streams exactly the tokens
// it generates alone, greedy and seeded.
TEST_F(ServingEngineTest, RetractedRequestsStreamTheTokensTheyGenerateAlone) {
  auto l1 = model_.pool(100);
  RadixCache cache(*l1, nullptr, nullptr);
  CpuModelRunner runner(model_.shape, model_.weights, *l1, nullptr);
  SchedulerOptions o;
  o.new_token_ratio = 0.2;  // admission counts a fifth of the outputs to come
  o.min_new_token_ratio = 0.1;
  ServingEngine engine(cache, *l1, nullptr, runner, o);
  std::vector<Request> requests;
  for (int c = 0; c < 3; ++c) requests.push_back(request(prompt_of(c, c), 60));  // 29 + 59 slots each
  requests[2].sampling.temperature = 1.0f;
  requests[2].sampling.seed = 4;
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (const Request& r : requests) {
    auto stream = engine.submit(r);
    ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
    streams.push_back(std::move(*stream));
  }
  std::vector<Read> reads;
  for (auto& s : streams) reads.push_back(read_all(*s));
  EXPECT_GT(engine.stats().scheduler.retractions, 0u) << "two requests of 88 slots do not fit in 100";
  for (int c = 0; c < 2; ++c) {
    ASSERT_TRUE(reads[c].result.status.is_ok()) << reads[c].result.status.to_string();
    EXPECT_EQ(reads[c].tokens, model_.generate_alone(prompt_of(c, c), 60)) << "request " << c;
  }
  // The seeded one against itself on an L1 large enough never to retract.
  auto big = model_.pool(512);
  RadixCache big_cache(*big, nullptr, nullptr);
  CpuModelRunner big_runner(model_.shape, model_.weights, *big, nullptr);
  ServingEngine alone(big_cache, *big, nullptr, big_runner);
  auto stream = alone.submit(requests[2]);
  ASSERT_TRUE(stream.is_ok());
  EXPECT_EQ(reads[2].tokens, read_all(**stream).tokens);
  EXPECT_EQ(alone.stats().scheduler.retractions, 0u);
}

TEST_F(ServingEngineTest, AFailingModelFailsItsBatchAndTheEngineGoesOn) {
  std::vector<std::string> lines;
  std::mutex lines_mutex;
  set_log_sink([&](LogLevel level, std::string_view component, std::string_view message) {
    std::lock_guard lock(lines_mutex);
    lines.push_back(std::string(log_level_name(level)) + " " + std::string(component) + ": " + std::string(message));
  });
  runner_control_->fail_ = true;
  auto failed = engine_->submit(request(prompt_of(0, 0), 4));
  ASSERT_TRUE(failed.is_ok());
  const Read r = read_all(**failed);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.result.finish_reason, FinishReason::kError);
  EXPECT_NE(r.result.status.message().find("injected"), std::string::npos);
  {
    // The operator sees it too: one error line with the request and the reason.
    std::lock_guard lock(lines_mutex);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("error engine: request "), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("injected model failure"), std::string::npos) << lines[0];
  }
  set_log_sink(nullptr);
  auto ok = engine_->submit(request(prompt_of(0, 0), 4));
  ASSERT_TRUE(ok.is_ok());
  const Read good = read_all(**ok);
  ASSERT_TRUE(good.result.status.is_ok());
  EXPECT_EQ(good.tokens, model_.generate_alone(prompt_of(0, 0), 4));
  ASSERT_TRUE(engine_->flush_cache().is_ok());
  EXPECT_EQ(engine_->stats().l1_free_slots, l1_->num_slots());
}

TEST_F(ServingEngineTest, BadRequestsAreRefusedAndStopEndsEverything) {
  EXPECT_EQ(engine_->submit(request({}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->submit(request({1, 2}, 0)).status().code(), StatusCode::kInvalidArgument);
  Request hot = request({1, 2}, 4);
  hot.sampling.temperature = 3.0f;
  EXPECT_EQ(engine_->submit(std::move(hot)).status().code(), StatusCode::kInvalidArgument);
  Request huge = request(prompt_of(1, 2), 1000);  // more slots than L1 has
  auto rejected = engine_->submit(std::move(huge));
  ASSERT_TRUE(rejected.is_ok());
  const Read r = read_all(**rejected);
  EXPECT_EQ(r.result.finish_reason, FinishReason::kError);
  EXPECT_EQ(r.result.status.code(), StatusCode::kResourceExhausted);

  runner_control_->allow(1);
  auto long_running = engine_->submit(request(prompt_of(2, 2), 90));
  ASSERT_TRUE(long_running.is_ok());
  ASSERT_TRUE((*long_running)->next(30s).has_value());
  runner_control_->wait_until_held();
  std::thread stopper([&] { engine_->stop(); });
  while (!engine_->stopping()) std::this_thread::yield();
  runner_control_->allow(-1);
  stopper.join();
  const Read ended = read_all(**long_running);
  ASSERT_TRUE(ended.finished);
  EXPECT_EQ(ended.result.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(ended.result.output.size(), 2u);
  EXPECT_EQ(engine_->submit(request({1, 2}, 4)).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace hiq
