// Read-only memory-mapped files: weights are used in place, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hearth {

class MappedFile {
 public:
  // Throws FileError naming the path when the file cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Gives back the resident pages wholly inside [data, data + n) of a read-only file mapping
// (madvise DONTNEED): for data that was copied into another layout at load. The bytes stay
// readable; a later read faults them in from the file again.
void drop_resident_pages(const void* data, size_t n);

// Reads a whole (small) file into a string; FileError when it cannot.
std::string read_text_file(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, then rename.
void write_file_atomic(const std::string& path, const std::string& bytes);

// A file written in pieces and published atomically: bytes go to a temporary file beside
// `path`; commit() flushes it to disk and renames it into place. Destroyed without commit(),
// the temporary file is removed and `path` is untouched.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void append(const void* data, size_t n);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace hearth
