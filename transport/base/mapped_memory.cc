#include "transport/base/mapped_memory.h"

#include <sys/mman.h>

namespace unloadkv {

MappedMemory::MappedMemory(size_t bytes, bool try_huge, void* address_hint) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (try_huge) {
    size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = mmap(address_hint, rounded, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      mem_ = p;
      bytes_ = rounded;
      huge_ = true;
      return;
    }
  }
  void* p = mmap(address_hint, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    mem_ = p;
    bytes_ = bytes;
  }
}

MappedMemory::~MappedMemory() {
  if (mem_ != nullptr) munmap(mem_, bytes_);
}

std::string DescribePages(const MappedMemory& memory, bool requested) {
  if (memory.huge()) return "2 MiB huge pages";
  return requested ? "4 KiB pages (no huge pages available: see /proc/sys/vm/nr_hugepages)"
                   : "4 KiB pages (huge pages disabled)";
}

}  // namespace unloadkv
