#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace hiq {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

// Closes the descriptor on every path out of open(); the mapping outlives it.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (data_ != nullptr && size_ > 0) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT) return not_found(path + ": no such file");
    return data_loss(path + ": cannot open: " + errno_text(error));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return data_loss(path + ": cannot stat: " + errno_text(errno));
  if (!S_ISREG(info.st_mode)) return invalid_argument(path + ": is not a regular file");
  if (info.st_size == 0) return MappedFile();
  const auto size = static_cast<size_t>(info.st_size);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (data == MAP_FAILED) return data_loss(path + ": cannot map " + std::to_string(size) + " bytes: " + errno_text(errno));
  return MappedFile(static_cast<const std::byte*>(data), size);
}

}  // namespace hiq
