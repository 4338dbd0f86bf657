// A mutex that ThreadSanitizer understands, with Abseil's thread-safety annotations.
//
// Why not absl::Mutex: Debian's Abseil is not built with -fsanitize=thread, so the happens-
// before edges of absl::Mutex are invisible to TSan, which then reports false races on every
// field it guards. std::mutex goes through pthread, which TSan intercepts.
#ifndef UNLOADKV_TRANSPORT_BASE_MUTEX_H_
#define UNLOADKV_TRANSPORT_BASE_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace unloadkv {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Takes the mutex if nobody holds it; true if it did.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` for its lifetime.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_MUTEX_H_
