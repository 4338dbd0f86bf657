// Anonymous memory from mmap, for buffers that get registered with an RNIC (staging rings, the
// value arena): 2 MiB huge pages when asked and available, else ordinary pages.
#ifndef UNLOADKV_TRANSPORT_BASE_MAPPED_MEMORY_H_
#define UNLOADKV_TRANSPORT_BASE_MAPPED_MEMORY_H_

#include <cstddef>
#include <string>

namespace unloadkv {

// Owns the mapping; unmaps on destruction. Not copyable. Zero-filled when created.
class MappedMemory {
 public:
  // With `try_huge`, the size is rounded up to a multiple of 2 MiB for the huge-page attempt.
  // On failure of both attempts data() is null and size() is 0. `address_hint` (nullable) is
  // where the kernel is asked to place the mapping, a request it may ignore (the simulated
  // fabric uses it so that runs see the same addresses whatever ASLR chose).
  MappedMemory(size_t bytes, bool try_huge, void* address_hint = nullptr);
  ~MappedMemory();
  MappedMemory(const MappedMemory&) = delete;
  MappedMemory& operator=(const MappedMemory&) = delete;

  char* data() const { return static_cast<char*>(mem_); }
  size_t size() const { return bytes_; }
  bool huge() const { return huge_; }

 private:
  void* mem_ = nullptr;
  size_t bytes_ = 0;
  bool huge_ = false;
};

// How `memory` is backed, for start-up lines: "2 MiB huge pages", or 4 KiB pages and why
// (`requested`: whether huge pages were asked for).
std::string DescribePages(const MappedMemory& memory, bool requested);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_MAPPED_MEMORY_H_
