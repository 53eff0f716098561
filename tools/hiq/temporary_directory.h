// tools/hiq/temporary_directory.h — a directory of mkdtemp's under $TMPDIR
// (else /tmp), removed with its contents when the owner goes.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include "core/status.h"

namespace hiq::cli {

class TemporaryDirectory {
 public:
  TemporaryDirectory() = default;
  ~TemporaryDirectory() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TemporaryDirectory(TemporaryDirectory&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TemporaryDirectory& operator=(TemporaryDirectory&& other) noexcept {
    std::swap(path_, other.path_);  // what this held goes with `other`
    return *this;
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;

  // A fresh directory named `prefix` and six random characters. Errors: kUnavailable.
  static Result<TemporaryDirectory> create(const std::string& prefix) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + prefix + ".XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) return unavailable("cannot create a directory from " + pattern);
    TemporaryDirectory d;
    d.path_ = std::move(pattern);
    return d;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace hiq::cli
