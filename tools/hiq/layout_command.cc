// `hiq layout`: what one token of a model's KV costs in each L2 record format,
// and how many tokens a host budget holds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "codec/codec.h"
#include "core/units.h"
#include "kv/model_config.h"
#include "memory/host_kv_pool.h"
#include "tools/hiq/commands.h"
#include "tools/hiq/host_tier_flags.h"
#include "tools/hiq/list_flag.h"
#include "tools/hiq/table.h"

namespace hiq::cli {
namespace {

struct LayoutFlags {
  std::string model = "qwen3-8b";
  int tp = 1;
  int page_size = 1;
  std::string hicache_size = "8GB";
  std::string codecs = "all";
  int64_t record_align = static_cast<int64_t>(kDefaultRecordAlign);  // signed: "-1" is an error, not 2^64-1
  bool json = false;
};

struct LayoutRow {
  KvCodecs codec;
  RecordLayout k;
  std::optional<RecordLayout> v;  // absent for MLA
  size_t bytes_per_token = 0;
  uint64_t capacity_tokens = 0;
  double ratio_vs_bf16 = 0;      // L1 (BF16/FP16) bytes per token ÷ this codec's
  double memory_reduction = 0;   // 1 − this codec's bytes ÷ L1 bytes
  // A rung of a ladder (`tiered:…`): the region a token takes in the tier,
  // padding included (the ratios and the capacity count it), and the
  // capacity when every token is at this rung. Rung -1: a codec alone.
  int rung = -1;
  size_t tier_bytes_per_token = 0;
};

Result<LayoutRow> layout_row(const KvGeometry& g, KvCodecs codec, size_t align, uint64_t budget) {
  LayoutRow row{codec, {}, std::nullopt};
  const auto make = [&](KvPart part) -> Result<RecordLayout> {
    auto layout = RecordLayout::make(codec.of(part), g.row_shape(part), align);
    if (!layout) return layout.status().with_context(g.name);
    return layout;
  };
  HIQ_ASSIGN_OR_RETURN(row.k, make(KvPart::kK));
  size_t per_layer = row.k.record_bytes;
  if (g.attention == AttentionKind::kMha) {
    HIQ_ASSIGN_OR_RETURN(RecordLayout v, make(KvPart::kV));
    per_layer += v.record_bytes;
    row.v = v;
  }
  row.bytes_per_token = per_layer * static_cast<size_t>(g.num_layers);
  // Whole pages only; dividing twice cannot overflow the way bytes × page_size can.
  const auto page = static_cast<uint64_t>(g.page_size);
  row.tier_bytes_per_token = row.bytes_per_token;
  row.capacity_tokens = budget / row.bytes_per_token / page * page;
  return row;
}

void set_ratios(const KvGeometry& g, LayoutRow& row) {
  const double l1 = static_cast<double>(g.l1_bytes_per_token());
  row.ratio_vs_bf16 = l1 / static_cast<double>(row.tier_bytes_per_token);
  row.memory_reduction = 1.0 - static_cast<double>(row.tier_bytes_per_token) / l1;
}

// A ladder's rungs as its pool lays them out (memory/host_kv_pool.h): rung
// 0's tokens fill the budget in whole pages, and each rung's capacity is
// what that region holds once every token is at that rung.
Result<std::vector<LayoutRow>> ladder_rows(const KvGeometry& g, std::string_view spec, size_t align,
                                           uint64_t budget) {
  HostKvPoolOptions options;
  HIQ_RETURN_IF_ERROR(parse_host_codec(spec, options).with_context("--hicache-codec"));
  std::vector<KvCodecs> codecs = {options.codec};
  codecs.insert(codecs.end(), options.demotion.begin(), options.demotion.end());
  std::vector<LayoutRow> rows;
  std::vector<size_t> sizes;
  for (const KvCodecs& c : codecs) {
    HIQ_ASSIGN_OR_RETURN(LayoutRow row, layout_row(g, c, align, budget));
    sizes.push_back(row.bytes_per_token);
    rows.push_back(std::move(row));
  }
  const auto strides_or = ladder_token_strides(sizes);
  if (!strides_or) return strides_or.status().with_context("--hicache-codec " + std::string(spec));
  const std::vector<size_t>& strides = *strides_or;
  const auto page = static_cast<uint64_t>(g.page_size);
  const uint64_t region = budget / strides.front() / page * page * strides.front();
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].rung = static_cast<int>(r);
    rows[r].tier_bytes_per_token = strides[r];
    rows[r].capacity_tokens = region / strides[r];
  }
  return rows;
}


// "−43.75 %", "+12.50 %", "0.00 %".
std::string signed_percent(double fraction) {
  const std::string digits = format_fixed(std::fabs(fraction) * 100, 2);
  if (digits == "0.00") return digits + " %";
  return (fraction < 0 ? "−" : "+") + digits + " %";
}

int run_layout(const LayoutFlags& f) {
  GeometryOptions options;
  options.tp_size = f.tp;
  options.page_size = f.page_size;
  auto geometry = resolve_model_geometry(f.model, options);
  if (!geometry) return report_error("layout", geometry.status());
  auto budget = parse_byte_size(f.hicache_size, kGB);
  if (!budget) return report_error("layout", budget.status().with_context("--hicache-size"));
  if (*budget == 0) return report_error("layout", invalid_argument("--hicache-size must be more than 0 bytes"));
  auto align = record_align_option(f.record_align);
  if (!align) return report_error("layout", align.status());
  const size_t record_align = *align;
  const KvGeometry& g = *geometry;
  const bool ladder = f.codecs.starts_with("tiered:");
  std::vector<LayoutRow> rows;
  std::vector<std::pair<KvCodecs, std::string>> unsupported;
  if (ladder) {
    auto rungs = ladder_rows(g, f.codecs, record_align, *budget);
    if (!rungs) return report_error("layout", rungs.status());
    rows = std::move(*rungs);
  } else {
    auto codecs = parse_kv_codec_list_flag(f.codecs, "--hicache-codec");
    if (!codecs) return report_error("layout", codecs.status());
    // A codec named explicitly must fit the model; with "all", one that cannot
    // (int4h on a head_dim that is not a power of two) is listed as unsupported.
    const bool all = f.codecs == "all";
    for (const KvCodecs& c : *codecs) {
      auto row = layout_row(g, c, record_align, *budget);
      if (row) {
        rows.push_back(*row);
      } else if (all && row.status().code() == StatusCode::kInvalidArgument && c == KvCodecs(CodecKind::kInt4H)) {
        unsupported.emplace_back(c, row.status().message());
      } else {
        return report_error("layout", row.status());
      }
    }
  }
  for (LayoutRow& r : rows) set_ratios(g, r);

  if (f.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const LayoutRow& r : rows) {
      out.push_back({
          {"model", g.name},
          {"attention", attention_kind_name(g.attention)},
          {"num_layers", g.num_layers},
          {"num_kv_heads", g.num_kv_heads},
          {"k_head_dim", g.k_head_dim},
          {"v_head_dim", g.v_head_dim},
          {"tp", g.tp_size},
          {"page_size", g.page_size},
          {"codec", r.codec.name()},
          {"record_align", record_align},
          {"bytes_per_row", r.k.record_bytes},
          {"bytes_per_row_v", r.v ? nlohmann::json(r.v->record_bytes) : nlohmann::json(nullptr)},
          {"payload_bytes", r.k.payload_bytes},
          {"scale_bytes", r.k.scale_bytes()},
          {"padding_bytes", r.k.padding_bytes()},
          {"bytes_per_token", r.bytes_per_token},
          {"l1_bytes_per_token", g.l1_bytes_per_token()},
          {"hicache_size_bytes", *budget},
          {"capacity_tokens", r.capacity_tokens},
          {"ratio_vs_bf16", r.ratio_vs_bf16},
          {"memory_reduction", r.memory_reduction},
          {"supported", true},
      });
      if (ladder) {
        out.back()["ladder"] = f.codecs;
        out.back()["rung"] = r.rung;
        out.back()["tier_bytes_per_token"] = r.tier_bytes_per_token;
      }
    }
    for (const auto& [codec, reason] : unsupported)
      out.push_back({{"model", g.name}, {"codec", codec.name()}, {"supported", false}, {"reason", reason}});
    // Paths need not be UTF-8: replace invalid bytes rather than throw.
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    return 0;
  }

  std::cout << g.name << ": " << g.num_layers << " layers, " << g.num_kv_heads << " KV head"
            << (g.num_kv_heads == 1 ? "" : "s") << " per rank (tp " << g.tp_size << ") × "
            << (g.attention == AttentionKind::kMla ? "latent " : "") << g.k_head_dim;
  if (g.attention == AttentionKind::kMha && g.v_head_dim != g.k_head_dim) std::cout << " (K) / " << g.v_head_dim << " (V)";
  std::cout << ", " << l1_dtype_name(g.l1_dtype) << " L1: " << format_count(g.l1_bytes_per_token())
            << " B/token\nhost budget " << format_bytes(*budget) << " (" << format_count(*budget)
            << " B), record align " << record_align << " B, page size " << g.page_size << "\n\n";
  const bool split_kv = g.attention == AttentionKind::kMha &&
                        (g.v_head_dim != g.k_head_dim ||
                         std::any_of(rows.begin(), rows.end(), [](const LayoutRow& r) { return r.codec.split(); }));
  std::vector<std::string> header = {"codec", split_kv ? "B/row K/V" : "B/row", "payload", "scales", "padding",
                                     "B/token"};
  if (ladder) header.insert(header.end(), {"B/token in tier", "L2 tokens, all at this rung"});
  else header.push_back("L2 tokens");
  header.insert(header.end(), {"vs bf16", "memory"});
  Table table(header);
  for (const LayoutRow& r : rows) {
    std::string per_row = format_count(r.k.record_bytes);
    if (split_kv) per_row += "/" + format_count(r.v->record_bytes);
    std::vector<std::string> cells = {r.codec.name(), per_row, format_count(r.k.payload_bytes),
                                      format_count(r.k.scale_bytes()), format_count(r.k.padding_bytes()),
                                      format_count(r.bytes_per_token)};
    if (ladder) cells.push_back(format_count(r.tier_bytes_per_token));
    cells.insert(cells.end(), {format_count(r.capacity_tokens), format_fixed(r.ratio_vs_bf16, 4) + "×",
                               signed_percent(-r.memory_reduction)});
    table.add_row(cells);
  }
  if (ladder)
    std::cout << f.codecs << ": one region; a token of an upper rung is padded to whole tokens of the last "
              << "(B/token in tier)\n";
  table.print(std::cout);
  for (const auto& [codec, reason] : unsupported) std::cout << codec.name() << ": n/a, " << reason << '\n';
  return 0;
}

}  // namespace

Subcommand add_layout_command(CLI::App& parent) {
  auto flags = std::make_shared<LayoutFlags>();
  CLI::App* app = parent.add_subcommand(
      "layout", "Bytes per row and per token of each L2 record format, and the tokens a host budget holds");
  app->add_option("--model", flags->model, "Preset name (qwen3-8b, llama-3.1-8b, qwen3-32b, deepseek-v3, …) or a config.json path")
      ->capture_default_str();
  app->add_option("--tp", flags->tp, "Tensor-parallel ranks: KV heads are split over them")->capture_default_str();
  app->add_option("--page-size", flags->page_size, "Tokens per page; capacity is a whole number of pages")
      ->capture_default_str();
  app->add_option("--hicache-size", flags->hicache_size,
                  "Host (L2) budget: 8GB (decimal), 8GiB (binary), fractions allowed; a plain number is GB")
      ->capture_default_str();
  app->add_option("--hicache-codec", flags->codecs,
                  "bf16, int8, fp8, int4, int4h, k=CODEC,v=CODEC (keys and values apart), a comma list, or all; "
                  "or one ladder, tiered:int8,int4h (a row per rung, as its tier lays them out)")
      ->capture_default_str();
  app->add_option("--record-align", flags->record_align,
                  "Pad each record to a multiple of this many bytes (128 gives the 1,152-byte SGLang INT8 record)")
      ->capture_default_str();
  app->add_flag("--json", flags->json, "Print a JSON list instead of a table");
  return {app, [flags] { return run_layout(*flags); }};
}

}  // namespace hiq::cli
