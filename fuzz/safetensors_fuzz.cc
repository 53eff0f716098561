// fuzz/safetensors_fuzz.cc — libFuzzer target of the safetensors header
// parser. Any input must either be refused with an error that names the file,
// or yield a header whose promises hold: the tensors tile the data section
// exactly and each spans its element count × dtype size. A broken promise
// traps, so the fuzzer reports it like a crash. Built with HIQ_FUZZ=ON
// (clang); run with scripts/fuzz.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/safetensors.h"

namespace {

void require(bool promise) {
  if (!promise) __builtin_trap();
}

void check_promises(const hiq::SafetensorsHeader& header, size_t file_size) {
  require(header.data_offset >= 8 && header.data_offset <= file_size);
  require(header.data_offset + header.data_bytes == file_size);
  uint64_t covered = 0;
  for (const hiq::SafetensorsEntry& t : header.tensors) {
    require(t.begin == covered && t.begin <= t.end && t.end <= header.data_bytes);
    uint64_t elements = 1;
    for (int64_t d : t.shape) {
      require(d >= 0);
      if (d == 0) elements = 0;
    }
    if (elements != 0)
      for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);  // cannot wrap: the bytes fit in the file
    require(elements * hiq::tensor_dtype_bytes(t.dtype) == t.end - t.begin);
    covered = t.end;
  }
  require(covered == header.data_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  const auto header = hiq::parse_safetensors_header(bytes, "fuzz-input");
  if (header.is_ok()) {
    check_promises(*header, size);
  } else {
    require(header.status().message().starts_with("fuzz-input"));
  }
  return 0;
}
