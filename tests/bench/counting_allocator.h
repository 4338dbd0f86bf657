// A counting allocator for benchmarks and tests: linking counting_allocator.cc replaces the
// global operator new and delete (every form) with malloc/free plus a count of allocations per
// thread (and holds the per-thread count of mutex acquisitions that counting_mutex.cc makes).
// Counts are read by thread id, so a benchmark can attribute the allocations of a loopback run to
// the client's threads and the server's.
//
// Thread-safety: every function may be called from any thread. Counting costs one relaxed
// atomic increment per allocation. The first 1024 threads that allocate get a counter of their
// own; later ones share the last (AllocationsOf then over-reports for that thread id only).
#ifndef UNLOADKV_TESTS_BENCH_COUNTING_ALLOCATOR_H_
#define UNLOADKV_TESTS_BENCH_COUNTING_ALLOCATOR_H_

#include <sys/types.h>

#include <cstdint>
#include <set>

namespace unloadkv::bench {

// Allocations (operator new of any form) made so far by the calling thread.
uint64_t ThisThreadAllocations();

// Allocations made so far by the threads in `tids` (Linux thread ids), including threads that
// have since exited.
uint64_t AllocationsOf(const std::set<pid_t>& tids);

// Mutex acquisitions (pthread_mutex_lock, which std::mutex and so unloadkv::Mutex call) made
// so far by the threads in `tids`. Counted only in a binary that also links counting_mutex
// (tests/bench/counting_mutex.cc), else 0.
uint64_t LocksOf(const std::set<pid_t>& tids);
// One acquisition by the calling thread (counting_mutex's pthread_mutex_lock calls it).
void CountLock();

// This process's threads now (Linux thread ids, from /proc/self/task). Taken before and after
// a side starts its threads, they tell that side's threads apart (Without).
std::set<pid_t> ThreadIdsNow();
// The ids in `a` that are not in `b`.
std::set<pid_t> Without(const std::set<pid_t>& a, const std::set<pid_t>& b);

}  // namespace unloadkv::bench

#endif  // UNLOADKV_TESTS_BENCH_COUNTING_ALLOCATOR_H_
