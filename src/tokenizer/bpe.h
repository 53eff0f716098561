// tokenizer/bpe.h — the BPE model of a byte-level tokenizer: the vocabulary,
// the ranked merges, and the merging of one pre-token into ids.
//
// Merging follows Hugging Face's (models/bpe/word.rs) step for step, so ties
// and stale pairs resolve the same way: the pre-token starts as one symbol
// per byte; all adjacent pairs that have a merge go into a min-heap ordered
// by (rank, position); the top pair is merged into the left symbol of a
// linked list unless it is stale (a neighbour changed, so the pair there no
// longer yields the same token), and the new symbol's pairs with its
// neighbours are pushed. O(n log n) per pre-token, so a run of 100 000
// spaces costs what its length says, not its square.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace hiq {

// Ids are below this bound: vectors indexed by id stay small even when a file
// lies (real vocabularies hold up to a few hundred thousand tokens).
inline constexpr int32_t kMaxTokenIds = 1 << 21;

class BpeModel {
 public:
  // Reads the "model" object of a tokenizer.json; errors name the field
  // ("model.merges[3]"). Accepted: type "BPE"; vocab (token →
  // distinct id in [0, kMaxTokenIds)); merges as "a b" strings ("#version"
  // lines skipped) or [a, b] pairs, a, b and a+b in the vocabulary (a later
  // duplicate re-ranks the pair, as in Hugging Face); ignore_merges; unk_token
  // (must be in the vocabulary), fuse_unk; dropout null or 0. Refused, by
  // field: byte_fallback true, a continuing_subword_prefix or
  // end_of_word_suffix other than null or "" (the value is named), any
  // other type.
  static Result<BpeModel> from_json(const nlohmann::json& model);

  // Appends the ids of one pre-token, given as its raw bytes (not yet spelt
  // in the byte-level alphabet). Errors (kInvalidArgument): a byte whose
  // alphabet character is not in the vocabulary while the model has no
  // unk_token (Hugging Face would silently drop the byte).
  Status encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  // The id of a vocabulary string (in the byte-level alphabet: " hi" is "Ġhi").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The vocabulary string of `id`, or null when no token has that id.
  const std::string* token(int32_t id) const;
  // One above the highest id in the vocabulary.
  int32_t id_bound() const { return static_cast<int32_t>(tokens_.size()); }
  // The number of vocabulary strings (Hugging Face numbers added tokens that
  // are not among them from here on).
  size_t vocab_count() const { return vocab_.size(); }
  size_t merge_count() const { return merges_.size(); }

 private:
  // What merging the pair (left, right) gives.
  struct Merge {
    int32_t rank = 0;    // position in the merges list: lower merges first
    int32_t new_id = 0;  // the id of left + right
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void merge_symbols(std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;  // vocabulary string → id
  std::vector<std::string> tokens_;                 // id → vocabulary string ("" where no token has the id)
  std::vector<bool> has_token_;                     // id → whether a token has it (a token may be "")
  std::unordered_map<uint64_t, Merge> merges_;      // pair_key(left, right) → merge
  std::array<int32_t, 256> byte_ids_{};             // byte → id of its alphabet character, or -1
  bool ignore_merges_ = false;   // a pre-token that is a vocabulary string is taken whole (Llama 3)
  std::optional<int32_t> unk_id_;  // stands for bytes without a token, when the model names one
  bool fuse_unk_ = false;          // consecutive unknown bytes become one unk
};

}  // namespace hiq
