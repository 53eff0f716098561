#include "tokenizer/bpe.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kv/config_reader.h"
#include "core/json_input.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"

namespace hiq {
namespace {

using nlohmann::json;

// One pair waiting in the heap.
struct Candidate {
  int32_t rank;    // of the merge; lower first
  int32_t pos;     // index of the left symbol; lower first among equal ranks
  int32_t new_id;  // what the merge gives, to recognise a stale entry
};

// std::push_heap keeps the largest on top; "larger" here means merged later.
bool merged_later(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

// One symbol of the word being merged.
struct Symbol {
  int32_t id;    // the token it is now
  int32_t prev;  // index of the symbol before it, or -1
  int32_t next;  // index of the symbol after it, or -1
  bool alive;    // false once merged into its left neighbour
};

Result<int32_t> read_id(const json& value, const std::string& field) {
  if (!value.is_number_integer())
    return field_error(field, "must be an integer id (got " + describe_json_value(value) + ")");
  if (value.is_number_unsigned() ? value.get<uint64_t>() >= kMaxTokenIds
                                 : value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxTokenIds)
    return field_error(field, "must be an id in [0, " + std::to_string(kMaxTokenIds) + ") (got " +
                                  describe_json_value(value) + ")");
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace

Result<BpeModel> BpeModel::from_json(const json& model) {
  const std::string path = "model";
  if (!model.is_object()) return field_error(path, "must be an object (got " + describe_json_value(model) + ")");
  if (member_or_null(model, "type").is_null())
    return field_error("model.type", "is missing (the supported model type is \"BPE\")");
  HIQ_ASSIGN_OR_RETURN(const std::string type, required_string(model, "type", path));
  if (type != "BPE")
    return field_error("model.type", "is " + quote_for_message(type) + "; only \"BPE\" (byte-level BPE) is supported");

  HIQ_ASSIGN_OR_RETURN(const bool byte_fallback, optional_bool(model, "byte_fallback", false, path));
  if (byte_fallback)
    return field_error("model.byte_fallback", "is true; byte-fallback BPE (SentencePiece style) is not supported");
  // Hugging Face glues these affixes onto symbols while merging; "" glues
  // nothing (Qwen2.5 and Qwen3 write "" for both), so only text is refused.
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json& affix = member_or_null(model, key);
    if (affix.is_null() || (affix.is_string() && affix.get_ref<const std::string&>().empty())) continue;
    return field_error(member_path(path, key),
                       "is " + describe_json_value(affix) +
                           "; only null or \"\" (no affix) is supported by byte-level BPE");
  }
  if (const json& dropout = member_or_null(model, "dropout"); !dropout.is_null()) {
    if (!dropout.is_number() || dropout.get<double>() != 0.0)
      return field_error("model.dropout", "is " + describe_json_value(dropout) +
                                              "; only null or 0 (BPE dropout is for training, not serving)");
  }

  BpeModel bpe;
  HIQ_ASSIGN_OR_RETURN(bpe.ignore_merges_, optional_bool(model, "ignore_merges", false, path));
  HIQ_ASSIGN_OR_RETURN(bpe.fuse_unk_, optional_bool(model, "fuse_unk", false, path));

  // The vocabulary.
  const json& vocab = member_or_null(model, "vocab");
  if (vocab.is_null()) return field_error("model.vocab", "is missing");
  if (!vocab.is_object())
    return field_error("model.vocab", "must be an object of token → id (got " + describe_json_value(vocab) + ")");
  bpe.vocab_.reserve(vocab.size());
  int32_t highest = -1;
  for (const auto& [token, value] : vocab.items()) {
    HIQ_ASSIGN_OR_RETURN(const int32_t id, read_id(value, "model.vocab[" + quote_for_message(token) + "]"));
    bpe.vocab_.emplace(token, id);
    highest = std::max(highest, id);
  }
  bpe.tokens_.resize(static_cast<size_t>(highest + 1));
  bpe.has_token_.assign(static_cast<size_t>(highest + 1), false);
  for (const auto& [token, id] : bpe.vocab_) {
    if (bpe.has_token_[id]) {
      const std::string& other = bpe.tokens_[id];
      return field_error("model.vocab", "gives id " + std::to_string(id) + " to both " +
                                            quote_for_message(std::min(token, other)) + " and " +
                                            quote_for_message(std::max(token, other)));
    }
    bpe.tokens_[id] = token;
    bpe.has_token_[id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = bpe.vocab_.find(std::string(byte_level_char(static_cast<uint8_t>(b))));
    bpe.byte_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
  }
  if (!member_or_null(model, "unk_token").is_null()) {
    HIQ_ASSIGN_OR_RETURN(const std::string unk, required_string(model, "unk_token", path));
    const auto it = bpe.vocab_.find(unk);
    if (it == bpe.vocab_.end())
      return field_error("model.unk_token", "names " + quote_for_message(unk) + ", which is not in the vocabulary");
    bpe.unk_id_ = it->second;
  }

  // The merges, ranked by position.
  const json& merges = member_or_null(model, "merges");
  if (merges.is_null()) return field_error("model.merges", "is missing");
  if (!merges.is_array())
    return field_error("model.merges", "must be an array of \"a b\" strings or [a, b] pairs (got " +
                                           describe_json_value(merges) + ")");
  bpe.merges_.reserve(merges.size());
  int32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& entry = merges[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    std::string left, right;
    if (entry.is_string()) {
      const std::string& line = entry.get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;  // a header line of merges.txt; not ranked
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        return field_error(field, "must be two tokens separated by one space (got " + quote_for_message(line) + ")");
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      return field_error(field, "must be an \"a b\" string or an [a, b] pair of strings (got " +
                                    describe_json_value(entry) + ")");
    }
    const auto find = [&](const std::string& token) -> Result<int32_t> {
      const auto it = bpe.vocab_.find(token);
      if (it == bpe.vocab_.end())
        return field_error(field, "merges " + quote_for_message(left) + " and " + quote_for_message(right) +
                                      ", but " + quote_for_message(token) + " is not in the vocabulary");
      return it->second;
    };
    HIQ_ASSIGN_OR_RETURN(const int32_t left_id, find(left));
    HIQ_ASSIGN_OR_RETURN(const int32_t right_id, find(right));
    HIQ_ASSIGN_OR_RETURN(const int32_t new_id, find(left + right));
    bpe.merges_.insert_or_assign(pair_key(left_id, right_id), Merge{rank, new_id});
    ++rank;
  }
  return bpe;
}

std::optional<int32_t> BpeModel::token_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token(int32_t id) const {
  if (id < 0 || id >= id_bound() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

Status BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return Status::ok();
  if (ignore_merges_) {
    std::string spelt;
    append_byte_level(spelt, bytes);
    if (const auto it = vocab_.find(spelt); it != vocab_.end()) {
      out.push_back(it->second);
      return Status::ok();
    }
  }
  // One symbol per byte; bytes without a token become unk (fused when asked),
  // as in Hugging Face's merge_word.
  std::vector<int32_t> symbols;
  symbols.reserve(bytes.size());
  bool last_was_unk = false;
  for (char c : bytes) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      symbols.push_back(id);
      last_was_unk = false;
      continue;
    }
    if (!unk_id_) {
      constexpr char kHex[] = "0123456789abcdef";
      const auto b = static_cast<uint8_t>(c);
      return invalid_argument(std::string("byte 0x") + kHex[b >> 4] + kHex[b & 15] +
                              " has no token in the vocabulary and the model names no unk_token");
    }
    if (!(last_was_unk && fuse_unk_)) symbols.push_back(*unk_id_);
    last_was_unk = true;
  }
  merge_symbols(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  return Status::ok();
}

void BpeModel::merge_symbols(std::vector<int32_t>& ids) const {
  if (ids.size() < 2 || merges_.empty()) return;
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Symbol> symbols(ids.size());
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};

  std::vector<Candidate> heap;
  heap.reserve(ids.size());
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const Merge* m = find_merge(ids[i], ids[i + 1])) heap.push_back({m->rank, i, m->new_id});
  }
  std::make_heap(heap.begin(), heap.end(), merged_later);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), merged_later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Stale: the pair at this position no longer yields the same token.
    const Merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;

    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;

    if (left.prev >= 0) {
      if (const Merge* before = find_merge(symbols[left.prev].id, left.id)) {
        heap.push_back({before->rank, left.prev, before->new_id});
        std::push_heap(heap.begin(), heap.end(), merged_later);
      }
    }
    if (left.next >= 0) {
      if (const Merge* after = find_merge(left.id, symbols[left.next].id)) {
        heap.push_back({after->rank, top.pos, after->new_id});
        std::push_heap(heap.begin(), heap.end(), merged_later);
      }
    }
  }
  ids.clear();
  for (const Symbol& s : symbols)
    if (s.alive) ids.push_back(s.id);
}

}  // namespace hiq
