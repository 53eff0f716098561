// A stand-in libcuda.so.1 for tests/gpu_skip_policy_test.sh: a CUDA driver
// that is installed (version 13.0) but fails to initialise, as on a GPU
// machine whose driver or device is broken. Loaded through LD_LIBRARY_PATH by
// the CUDA runtime, which finds every driver entry point through
// cuGetProcAddress; cudaGetDeviceCount then fails with cudaErrorUnknown, and
// the GPU tests must fail, not skip.
#include <cstring>

namespace {
using CuResult = int;
constexpr CuResult kSuccess = 0;
constexpr CuResult kErrorNotFound = 500;  // CUDA_ERROR_NOT_FOUND
constexpr CuResult kErrorUnknown = 999;   // CUDA_ERROR_UNKNOWN
}  // namespace

extern "C" {

CuResult cuInit(unsigned int) { return kErrorUnknown; }

CuResult cuDriverGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}

CuResult cuGetProcAddress_v2(const char* symbol, void** function, int, unsigned long long, int* found);

CuResult cuGetProcAddress(const char* symbol, void** function, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, function, version, flags, nullptr);
}

CuResult cuGetProcAddress_v2(const char* symbol, void** function, int, unsigned long long, int* found) {
  *function = nullptr;
  if (std::strcmp(symbol, "cuInit") == 0) *function = reinterpret_cast<void*>(&cuInit);
  if (std::strcmp(symbol, "cuDriverGetVersion") == 0) *function = reinterpret_cast<void*>(&cuDriverGetVersion);
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) *function = reinterpret_cast<void*>(&cuGetProcAddress_v2);
  if (found != nullptr) *found = *function != nullptr ? 1 : 2;  // CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND
  return *function != nullptr ? kSuccess : kErrorNotFound;
}

}  // extern "C"
