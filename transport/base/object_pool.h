// Per-thread pools of objects for the data path (issue 39: no allocation per request).
//
// A callback whose state is larger than two pointers makes std::function allocate; a request's
// state taken from a pool and pointed to by its callbacks does not. ObjectPool<T>::Take hands
// out a T (a spare of this thread's, or a new one); Give takes it back, reset to T() so that
// nothing it held (a buffer's contents, a reference) outlives its use, while the capacity of
// the buffers it owns is kept where T's assignment keeps it. A thread keeps at most
// `kMaxSpares` spares; beyond that, and after its spares are destroyed at its exit, Give
// deletes.
//
// Ownership: the taker owns the object until it gives it back (to the pool of whichever thread
// gives it). Every object must be given back or deleted exactly once; one that is forgotten
// leaks (LeakSanitizer reports it).
#ifndef UNLOADKV_TRANSPORT_BASE_OBJECT_POOL_H_
#define UNLOADKV_TRANSPORT_BASE_OBJECT_POOL_H_

#include <cstddef>
#include <memory>
#include <vector>

namespace unloadkv {

// Hidden: a shared library built from this code (the SDK's) keeps its pools to itself rather
// than exporting them.
template <typename T, size_t kMaxSpares = 256>
class __attribute__((visibility("hidden"))) ObjectPool {
 public:
  static T* Take() {
    std::vector<std::unique_ptr<T>>* spares = Spares();
    if (spares == nullptr || spares->empty()) return new T();
    T* t = spares->back().release();
    spares->pop_back();
    return t;
  }
  // Resets `t` with `reset` (which must leave nothing of the last use behind) and keeps it.
  template <typename Reset>
  static void Give(T* t, Reset&& reset) {
    std::vector<std::unique_ptr<T>>* spares = Spares();
    if (spares == nullptr || spares->size() >= kMaxSpares) {
      delete t;
      return;
    }
    reset(*t);
    spares->emplace_back(t);
  }
  static void Give(T* t) {
    Give(t, [](T& v) { v = T(); });
  }
  // This thread's spares (for tests).
  static size_t spares() {
    std::vector<std::unique_ptr<T>>* s = Spares();
    return s == nullptr ? 0 : s->size();
  }

 private:
  // This thread's spares; null once they were destroyed at the thread's exit (a Give from a
  // later destructor then deletes, as engine/deferred.cc's pool does). `gone` is trivially
  // destructible, so it stays readable after the thread's other thread_locals are destroyed.
  static std::vector<std::unique_ptr<T>>* Spares() {
    thread_local bool gone = false;
    struct Holder {
      std::vector<std::unique_ptr<T>> spares;
      ~Holder() { gone = true; }
    };
    thread_local Holder holder;
    return gone ? nullptr : &holder.spares;
  }
};

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_OBJECT_POOL_H_
