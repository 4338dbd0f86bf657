// Destroys objects on its own thread. A replica drops a replication link from inside that
// link's own callbacks (an acknowledgment that deposes the primary, a failure), where
// destroying the link would free the RPC client still running the callback; handing it here
// instead makes the destruction happen after the callback returned.
//
// Without a thread (kInline: a server embedded in a one-thread simulation), the objects are
// dropped by Drain, which the owner calls where no callback is running.
//
// Thread-safety: Release and Drain from any thread (never Drain from the reaper's own thread,
// nor, inline, from inside a callback that may hold what is released).
#ifndef UNLOADKV_SERVER_REAPER_H_
#define UNLOADKV_SERVER_REAPER_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace unloadkv::server {

class Reaper {
 public:
  enum class Mode { kThread, kInline };
  explicit Reaper(Mode mode = Mode::kThread);
  // Drains, then stops the thread.
  ~Reaper();
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Drops this reference on the reaper's thread.
  void Release(std::shared_ptr<void> object);
  // Returns once everything released before the call was dropped.
  void Drain();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<void>> queue_;  // guarded by mu_
  uint64_t released_ = 0, dropped_ = 0;      // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_REAPER_H_
