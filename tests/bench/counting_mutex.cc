// Linking this file makes pthread_mutex_lock, as called from the binary's own code (std::mutex
// and so unloadkv::Mutex, whose lock is inlined here), count one acquisition for the calling
// thread (counting_allocator.h: LocksOf) before it calls the C library's. For benchmarks: the
// count is exact, its cost a relaxed atomic increment and an indirect call per acquisition.
// Locks taken inside shared libraries (libstdc++, libc) call their own and are not counted.
#include <dlfcn.h>
#include <pthread.h>

#include <cstdlib>

#include "tests/bench/counting_allocator.h"

extern "C" int pthread_mutex_lock(pthread_mutex_t* mutex) {
  using Lock = int (*)(pthread_mutex_t*);
  // dlsym's own locking is internal to the C library: it does not come back here.
  static const Lock real = reinterpret_cast<Lock>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
  if (real == nullptr) std::abort();
  unloadkv::bench::CountLock();
  return real(mutex);
}
