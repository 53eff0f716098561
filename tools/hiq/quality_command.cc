// `hiq quality`: what each host-tier codec does to the model's output, with
// the prefix really restored from L2 (eval/quality.h), on the CPU or the
// CUDA backend. Texts come from a JSON-lines file ({"text": ...} through the
// model's tokenizer, or {"tokens": [...]}) or are drawn at random
// (--random-texts, for checkpoints with random weights).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "eval/quality.h"
#include "memory/cuda_device_kv_pool.h"
#include "model/cuda_model.h"
#include "model/loaded_model.h"
#include "tokenizer/tokenizer.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/host_tier_flags.h"
#include "tools/hiq/table.h"
#include "transfer/cuda_transfer_engine.h"

namespace hiq::cli {
namespace {

struct QualityFlags {
  std::string model;
  std::string device = "cpu";
  std::string texts;
  int random_texts = 0;
  uint64_t seed = 1;
  int max_texts = 0;
  int64_t prefix_len = 1024, continuation_len = 255, greedy_len = 64;
  std::string codecs = "bf16,int8,fp8,int4,int4h";
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);
  int64_t lag = 0;        // --lag: the workload mode (0: off)
  int64_t reads = 1;      // --reads: reads of each prefix in it
  std::string host_size;  // --hicache-size: its L2 budget
  bool json = false;
};

// --hicache-codec: codecs, K/V pairs and ladders (list_flag.h joins each
// into one item).
Result<std::vector<QualityTier>> parse_tier_list(const std::string& text) {
  if (text == "all") return std::vector<QualityTier>(std::begin(kAllCodecs), std::end(kAllCodecs));
  HIQ_ASSIGN_OR_RETURN(const std::vector<std::string> items,
                       parse_list_flag(text, "--hicache-codec", ListRepeats::kAllow));
  std::vector<QualityTier> out;
  for (const std::string& spec : join_kv_codec_items(items)) {
    HostKvPoolOptions o;
    HIQ_RETURN_IF_ERROR(parse_host_codec(spec, o).with_context("--hicache-codec"));
    QualityTier tier(o.codec);
    tier.demotion = o.demotion;
    if (std::find(out.begin(), out.end(), tier) != out.end())
      return invalid_argument("--hicache-codec: '" + tier.name() + "' is given twice");
    out.push_back(std::move(tier));
  }
  return out;
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  HIQ_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load(path));
  return std::make_unique<Tokenizer>(std::move(tokenizer));
}

// The texts of a JSON-lines file, as token ids. Errors name the line.
Result<std::vector<std::vector<int32_t>>> read_texts(const QualityFlags& f, int vocab, size_t limit) {
  std::ifstream in(f.texts);
  if (!in) return not_found(f.texts + ": cannot open");
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::vector<int32_t>> texts;
  std::string line;
  for (size_t number = 1; std::getline(in, line) && texts.size() < limit; ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = f.texts + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(where + ": not a JSON object");
    std::vector<int32_t> ids;
    if (j.contains("tokens")) {
      if (!j["tokens"].is_array()) return invalid_argument(where + ": \"tokens\" must be a list of token ids");
      for (const nlohmann::json& id : j["tokens"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
          return invalid_argument(where + ": a token id outside the vocabulary of " + std::to_string(vocab));
        ids.push_back(id.get<int32_t>());
      }
    } else if (j.contains("text") && j["text"].is_string()) {
      if (!tokenizer) {
        auto loaded = load_tokenizer(f.model + "/tokenizer.json");
        if (!loaded) return loaded.status().with_context("a \"text\" needs the model directory's tokenizer");
        tokenizer = std::move(*loaded);
      }
      HIQ_ASSIGN_OR_RETURN(ids, tokenizer->encode(j["text"].get<std::string>(), /*parse_special=*/false));
    } else {
      return invalid_argument(where + ": needs \"text\" (a string) or \"tokens\" (token ids)");
    }
    texts.push_back(std::move(ids));
  }
  if (texts.empty()) return invalid_argument(f.texts + ": no texts");
  return texts;
}

std::vector<std::vector<int32_t>> random_texts(int count, size_t length, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<std::vector<int32_t>> texts(static_cast<size_t>(count));
  for (auto& text : texts) {
    text.resize(length);
    for (int32_t& t : text) t = token(rng);
  }
  return texts;
}

// The model on `device` with an L1 of `slots` tokens, and its transfer engines.
struct Backend {
  std::unique_ptr<DeviceKvPool> l1;
  std::unique_ptr<CudaModel> cuda;
  QualityModel model;
};

Result<std::unique_ptr<Backend>> make_backend(const LoadedModel& m, const std::string& device, size_t slots) {
  auto b = std::make_unique<Backend>();
  const KvGeometry geometry = m.config().kv_geometry(1);
  if (device == "cpu") {
    HIQ_ASSIGN_OR_RETURN(b->l1, make_host_memory_device_pool(geometry, slots));
    b->model = cpu_quality_model(m.shape(), m.weights(), *b->l1);
  } else if (device == "cuda") {
    HIQ_ASSIGN_OR_RETURN(b->cuda, make_cuda_model(m.shape(), m.weights()));
    HIQ_ASSIGN_OR_RETURN(b->l1, make_cuda_device_kv_pool(geometry, slots));
    DeviceKvPool* l1 = b->l1.get();
    CudaModel* model = b->cuda.get();
    b->model.vocab_size = m.shape().vocab_size;
    b->model.forward = [model, l1](std::span<const int32_t> tokens, std::span<const SlotId> s, size_t first_new,
                                   bool all) -> Result<std::vector<float>> {
      const ModelSequence seq{tokens, s, first_new};
      HIQ_ASSIGN_OR_RETURN(ModelOutput out,
                           model->forward(*l1, std::span(&seq, 1), all ? LogitsWanted::kAll : LogitsWanted::kLast));
      return std::move(out.logits);
    };
    b->model.make_transfer = [l1](HostKvPool& l2) -> Result<std::unique_ptr<TransferEngine>> {
      HIQ_ASSIGN_OR_RETURN(std::unique_ptr<CudaTransferEngine> engine, make_cuda_transfer_engine(*l1, l2));
      return std::unique_ptr<TransferEngine>(std::move(engine));
    };
    b->model.l1 = l1;
  } else {
    return invalid_argument("--device must be cpu or cuda");
  }
  return b;
}

std::string percent(double fraction, int digits) { return format_fixed(fraction * 100, digits) + " %"; }

// A change, signed, in percent (unit " %") or in percentage points (a
// difference of two changes, " points"), with its standard error when it
// has one: "+0.119 % ± 0.082".
std::string signed_change(double fraction, double stderr_fraction, std::string_view unit) {
  std::string out = (fraction >= 0 ? "+" : "") + format_fixed(fraction * 100, 3) + std::string(unit);
  if (std::isfinite(stderr_fraction)) out += " ± " + format_fixed(stderr_fraction * 100, 3);
  return out;
}

// Calls `f` for each pair of valid tiers, in the order given, that scored
// some text in common.
template <typename F>
void for_each_pair(const std::vector<CodecQuality>& tiers, F f) {
  for (size_t i = 0; i < tiers.size(); ++i)
    for (size_t j = i + 1; j < tiers.size(); ++j) {
      if (!tiers[i].valid || !tiers[j].valid) continue;
      const PairedPerplexityChange p = paired_perplexity_change(tiers[i], tiers[j]);
      if (p.pairs > 0) f(tiers[i], tiers[j], p);
    }
}

nlohmann::json scores_json(const std::vector<TextScore>& scores) {
  nlohmann::json out = nlohmann::json::array();
  for (const TextScore& t : scores)
    out.push_back({{"text", t.text}, {"read", t.read}, {"nll_change", t.nll_change}, {"rung_tokens", t.rung_tokens}});
  return out;
}

// A JSON number, or null for NaN (a figure that has no value).
nlohmann::json number_or_null(double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(); }

std::string scientific(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", value);
  return buf;
}

int run_quality(const QualityFlags& f) {
  QualityOptions options;
  if (f.prefix_len <= 0 || f.continuation_len <= 0 || f.greedy_len <= 0)
    return report_error("quality", invalid_argument("--prefix-len, --continuation-len and --greedy-len must be positive"));
  options.prefix_len = static_cast<size_t>(f.prefix_len);
  options.continuation_len = static_cast<size_t>(f.continuation_len);
  options.greedy_len = static_cast<size_t>(f.greedy_len);
  auto align = record_align_option(f.record_align);
  if (!align) return report_error("quality", align.status());
  options.record_align = *align;
  auto codecs = parse_tier_list(f.codecs);
  if (!codecs) return report_error("quality", codecs.status());
  options.codecs = *std::move(codecs);
  if (f.lag < 0) return report_error("quality", invalid_argument("--lag must not be negative"));
  options.lag = static_cast<size_t>(f.lag);
  if (f.reads < 1) return report_error("quality", invalid_argument("--reads must be positive"));
  options.reads = static_cast<size_t>(f.reads);
  if (!f.host_size.empty()) {
    auto bytes = parse_byte_size(f.host_size, kGB);
    if (!bytes) return report_error("quality", bytes.status().with_context("--hicache-size"));
    options.host_bytes = *bytes;
  }
  if (auto s = options.validate(); !s.is_ok()) return report_error("quality", s);
  if (f.texts.empty() == (f.random_texts == 0))
    return report_error("quality", invalid_argument("give one of --texts FILE and --random-texts N"));
  if (f.random_texts < 0) return report_error("quality", invalid_argument("--random-texts must be positive"));

  auto loaded = LoadedModel::load(f.model);
  if (!loaded) return report_error("quality", loaded.status());
  const LoadedModel& m = **loaded;
  const int vocab = m.shape().vocab_size;
  const size_t needed = options.prefix_len + options.continuation_len + 1;
  const size_t limit = f.max_texts > 0 ? static_cast<size_t>(f.max_texts) : SIZE_MAX;
  std::vector<std::vector<int32_t>> texts;
  if (f.random_texts > 0) {
    texts = random_texts(std::min(f.random_texts, static_cast<int>(std::min<size_t>(limit, INT32_MAX))), needed, vocab,
                         f.seed);
  } else {
    auto read = read_texts(f, vocab, limit);
    if (!read) return report_error("quality", read.status());
    texts = std::move(*read);
  }
  auto backend = make_backend(m, f.device, quality_l1_slots(options));
  if (!backend) return report_error("quality", backend.status());

  const bool tty = isatty(STDERR_FILENO) != 0;
  auto report = evaluate_quality((*backend)->model, texts, options, [&](size_t done, size_t total) {
    if (tty) std::fprintf(stderr, "\rhiq quality: %zu/%zu texts%s", done, total, done == total ? "\n" : "");
    else if (done == total || done % 8 == 0) std::fprintf(stderr, "hiq quality: %zu/%zu texts\n", done, total);
  });
  if (!report) return report_error("quality", report.status());

  bool all_valid = true;
  for (const CodecQuality& q : report->codecs) all_valid = all_valid && q.valid;
  if (f.json) {
    nlohmann::json out = {{"model", f.model},
                          {"device", f.device},
                          {"texts", report->texts},
                          {"prefix_len", options.prefix_len},
                          {"continuation_len", options.continuation_len},
                          {"greedy_len", options.greedy_len},
                          {"record_align", options.record_align},
                          {"codecs", nlohmann::json::array()}};
    if (options.lag > 0) {
      out["lag"] = options.lag;
      out["reads"] = options.reads;
      out["host_bytes"] = options.host_bytes;
    }
    for (const CodecQuality& q : report->codecs)
      out["codecs"].push_back({{"codec", q.name},
                               {"valid", q.valid},
                               {"texts", q.texts},
                               {"missed_texts", q.missed_texts},
                               {"restored_tokens", q.restored_tokens},
                               {"restored_rung_tokens", q.restored_rung_tokens},
                               {"restored_bytes", q.restored_bytes},
                               {"perplexity_reference", q.perplexity_reference},
                               {"perplexity", q.perplexity},
                               {"perplexity_change", q.perplexity_change},
                               {"perplexity_change_stderr", number_or_null(q.perplexity_change_stderr)},
                               {"kl_mean", q.kl_mean},
                               {"kl_max", q.kl_max},
                               {"top1_heldout", q.top1_heldout},
                               {"top1_greedy", q.top1_greedy},
                               {"heldout_positions", q.heldout_positions},
                               {"greedy_positions", q.greedy_positions},
                               {"k_relative_rms", q.k_relative_rms},
                               {"v_relative_rms", q.v_relative_rms},
                               {"max_abs_error", q.max_abs_error},
                               {"scores", scores_json(q.scores)}});
    out["paired"] = nlohmann::json::array();
    for_each_pair(report->codecs, [&](const CodecQuality& a, const CodecQuality& b, const PairedPerplexityChange& p) {
      out["paired"].push_back({{"a", a.name},
                               {"b", b.name},
                               {"pairs", p.pairs},
                               {"perplexity_change_a", p.a},
                               {"perplexity_change_b", p.b},
                               {"difference", p.difference},
                               {"difference_stderr", number_or_null(p.stderr_difference)}});
    });
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << report->texts << " texts: prefix " << options.prefix_len << " tokens restored from L2, "
              << options.continuation_len << " held-out and " << options.greedy_len << " greedy tokens scored\n";
    if (options.lag > 0)
      std::cout << "workload: each prefix restored " << options.lag << " prefixes after it went in (" << options.reads
                << " reads), from an L2 of "
                << format_bytes(options.host_bytes) << "; restored tokens per rung, texts lost\n";
    Table t({"codec", "restored", "PPL ref", "PPL", "ΔPPL", "KL mean", "KL max", "top-1 held-out", "top-1 greedy",
             "K rel. RMS", "V rel. RMS"});
    for (const CodecQuality& q : report->codecs) {
      std::string restored = std::to_string(q.restored_tokens);
      if (q.restored_rung_tokens.size() > 1) {
        restored += " (";
        for (size_t r = 0; r < q.restored_rung_tokens.size(); ++r)
          restored += (r ? " / " : "") + std::to_string(q.restored_rung_tokens[r]);
        restored += ")";
      }
      if (options.lag > 0) restored += ", " + std::to_string(q.missed_texts) + " lost";
      if (!q.valid) {
        t.add_row({q.name, restored, "invalid: nothing was restored", "", "", "", "", "", "", "", ""});
        continue;
      }
      t.add_row({q.name, restored,
                 format_fixed(q.perplexity_reference, 4), format_fixed(q.perplexity, 4),
                 signed_change(q.perplexity_change, q.perplexity_change_stderr, " %"), scientific(q.kl_mean),
                 scientific(q.kl_max), percent(q.top1_heldout, 2), percent(q.top1_greedy, 2),
                 scientific(q.k_relative_rms), scientific(q.v_relative_rms)});
    }
    t.print(std::cout);
    std::cout << "ΔPPL ± its standard error over the texts\n";
    bool header = false;
    const char* scored = options.reads > 1 ? " reads" : " texts";
    for_each_pair(report->codecs, [&](const CodecQuality& a, const CodecQuality& b, const PairedPerplexityChange& p) {
      if (!header) std::cout << "\nΔPPL differences where both scored (a − b ± its standard error):\n";
      header = true;
      std::cout << "  " << a.name << " − " << b.name << ": " << signed_change(p.difference, p.stderr_difference, " points")
                << " over " << p.pairs << scored << " (" << signed_change(p.a, NAN, " %") << " against "
                << signed_change(p.b, NAN, " %") << ")\n";
    });
  }
  if (!all_valid) {
    std::cerr << "hiq quality: a codec restored nothing from L2; its figures are not a result\n";
    return 1;
  }
  return 0;
}

}  // namespace

Subcommand add_quality_command(CLI::App& parent) {
  auto f = std::make_shared<QualityFlags>();
  CLI::App* app = parent.add_subcommand(
      "quality", "Perplexity, KL and top-1 agreement of a model whose prefix KV is restored from each L2 codec");
  app->add_option("--model", f->model, "Hugging Face model directory")->required();
  app->add_option("--device", f->device, "cpu or cuda")->capture_default_str();
  app->add_option("--texts", f->texts, "JSON lines: {\"text\": ...} or {\"tokens\": [...]}");
  app->add_option("--random-texts", f->random_texts, "Instead of --texts: N texts of random token ids");
  app->add_option("--seed", f->seed, "Seed of --random-texts")->capture_default_str();
  app->add_option("--max-texts", f->max_texts, "Use at most this many texts (0: all)")->capture_default_str();
  app->add_option("--prefix-len", f->prefix_len, "Prefix tokens restored from L2")->capture_default_str();
  app->add_option("--continuation-len", f->continuation_len, "Held-out tokens scored after the prefix")
      ->capture_default_str();
  app->add_option("--greedy-len", f->greedy_len, "Greedy tokens compared after the prefix")->capture_default_str();
  app->add_option("--hicache-codec", f->codecs,
                  "Codecs to test, comma-separated (bf16 is the exact control); k=CODEC,v=CODEC is one entry with "
                  "separate codecs for keys and values, tiered:int8,int4h a ladder")
      ->capture_default_str();
  app->add_option("--lag", f->lag,
                  "Workload mode: each tier keeps its cache for the run, and each prefix is restored this many "
                  "prefixes after it went in (0: each text alone)")
      ->capture_default_str();
  app->add_option("--reads", f->reads, "Workload mode: read each prefix this many times, every --lag prefixes")
      ->capture_default_str();
  app->add_option("--hicache-size", f->host_size, "Workload mode: each tier's L2 budget (8GB, 64MB; GB when plain)");
  app->add_option("--record-align", f->record_align, "Pad L2 records to a multiple of this many bytes")
      ->capture_default_str();
  app->add_flag("--json", f->json, "Print JSON");
  return {app, [f] { return run_quality(*f); }};
}

}  // namespace hiq::cli
