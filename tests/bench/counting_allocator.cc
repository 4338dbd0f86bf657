#include "tests/bench/counting_allocator.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace unloadkv::bench {
namespace {

struct Counter {
  std::atomic<pid_t> tid{0};
  std::atomic<uint64_t> allocations{0};
  std::atomic<uint64_t> locks{0};
};

constexpr int kCounters = 1024;
Counter g_counters[kCounters];
std::atomic<int> g_used{0};
thread_local Counter* t_counter = nullptr;

// No allocation in here: it runs inside operator new.
Counter* ThisCounter() {
  if (t_counter == nullptr) {
    int i = g_used.fetch_add(1, std::memory_order_relaxed);
    if (i >= kCounters) i = kCounters - 1;
    g_counters[i].tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_relaxed);
    t_counter = &g_counters[i];
  }
  return t_counter;
}

void* Allocate(size_t n, size_t align) {
  ThisCounter()->allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) std::abort();  // benchmarks: no recovery from exhaustion
  return p;
}

// The sum of `field` over the counters of the threads in `tids`.
uint64_t SumOf(const std::set<pid_t>& tids, std::atomic<uint64_t> Counter::*field) {
  uint64_t sum = 0;
  const int used = std::min(g_used.load(std::memory_order_acquire), kCounters);
  for (int i = 0; i < used; ++i) {
    if (tids.count(g_counters[i].tid.load(std::memory_order_relaxed)) > 0) {
      sum += (g_counters[i].*field).load(std::memory_order_relaxed);
    }
  }
  return sum;
}

}  // namespace

uint64_t ThisThreadAllocations() {
  return ThisCounter()->allocations.load(std::memory_order_relaxed);
}

uint64_t AllocationsOf(const std::set<pid_t>& tids) { return SumOf(tids, &Counter::allocations); }

uint64_t LocksOf(const std::set<pid_t>& tids) { return SumOf(tids, &Counter::locks); }

void CountLock() { ThisCounter()->locks.fetch_add(1, std::memory_order_relaxed); }

std::set<pid_t> ThreadIdsNow() {
  std::set<pid_t> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') out.insert(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  closedir(d);
  return out;
}

std::set<pid_t> Without(const std::set<pid_t>& a, const std::set<pid_t>& b) {
  std::set<pid_t> out;
  for (pid_t t : a) {
    if (b.count(t) == 0) out.insert(t);
  }
  return out;
}

}  // namespace unloadkv::bench

using unloadkv::bench::Allocate;

void* operator new(size_t n) { return Allocate(n, 0); }
void* operator new[](size_t n) { return Allocate(n, 0); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return Allocate(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return Allocate(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return Allocate(n, static_cast<size_t>(a)); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, static_cast<size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
