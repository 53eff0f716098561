// server/model_files.h — what a model directory says about serving, beside
// its weights and tokenizer: generation_config.json (the tokens that end
// generation, the sampling defaults) and what the tokenizer adds to a text
// prompt (tokenizer.json's post-processor, tokenizer_config.json's
// add_bos_token), as transformers reads them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace hiq {

class Tokenizer;

// The serving part of a model's generation_config.json (and config.json).
struct GenerationConfig {
  // Tokens that end generation: generation_config.json's eos_token_id (a
  // number or a list), else config.json's, plus tokenizer_config.json's
  // eos_token where the tokenizer knows it (chat models end their turn with
  // it). Deduplicated, in that order.
  std::vector<int32_t> eos_token_ids;
  // Sampling defaults for requests that leave them out (SGLang and vLLM take
  // them from here too); absent: OpenAI's (temperature 1, top_p 1, top_k off).
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;
};

// Reads `dir`'s generation_config.json, config.json and tokenizer_config.json
// (each optional). `tokenizer` (may be null) resolves tokenizer_config.json's
// eos_token. Errors (kInvalidArgument, naming the file and field): invalid
// JSON, an eos id that is not a token id, a sampling value of the wrong type
// or out of range (temperature < 0, top_p outside (0, 1], top_k 0 or < -1).
Result<GenerationConfig> read_generation_config(const std::string& dir, const Tokenizer* tokenizer);

// The ids Hugging Face puts before a text encoded with add_special_tokens
// (the post-processor's TemplateProcessing, e.g. Llama 3's
// <|begin_of_text|>; else tokenizer_config.json's add_bos_token with its
// bos_token). Empty for tokenizers that add nothing (Qwen). Errors
// (kInvalidArgument): a post-processor that names a token the tokenizer
// lacks, or one that appends tokens after the text (not supported: a prompt
// must be extendable).
Result<std::vector<int32_t>> read_prompt_prefix(const std::string& dir, const Tokenizer& tokenizer);

// What identifies a model's KV for the storage tier's keys: "xxh3:" and the
// XXH3-64 of config.json and of every *.safetensors file's bytes (sorted by
// name, each name and length included). Two directories with the same
// weights agree wherever they are; a fine-tune of the same shapes does not.
// Reads every weight byte once. Errors (kNotFound, kDataLoss): a file that
// cannot be read.
Result<std::string> model_identity(const std::string& dir);

}  // namespace hiq
