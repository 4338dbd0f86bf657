// Lockstep: blocking code (threads that call synchronous APIs, as YCSB's client threads do)
// inside a one-thread simulation. Each participant is an OS thread, but exactly one thread
// runs at any time: a participant until it waits, then the driver, which advances the world
// and resumes the participants whose wait is over, in the order they were spawned. Every
// handover goes through one mutex, so what one thread wrote the next one sees, and a run is
// as deterministic as the world and the participants' code.
//
//   Lockstep ls([&] { return world.Step(); });
//   ls.Spawn([&] { client->Put("k", "v"); });   // Put ends in Wait(), through the client
//   absl::Status st = ls.Run();
//
// Thread-safety: Spawn from the driver thread or a participant; Run from the driver thread;
// Wait from a participant, or from the driver thread outside Run (it then steps the world
// itself).
#ifndef UNLOADKV_TRANSPORT_SIM_LOCKSTEP_H_
#define UNLOADKV_TRANSPORT_SIM_LOCKSTEP_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace unloadkv::sim {

class Lockstep {
 public:
  // `step` advances the world by one step, false when it cannot advance any more (nothing
  // is left to run and nothing will ever be: whoever still waits would wait forever).
  // With `max_turns_without_step` > 0, Run also fails when participants resume that many
  // times in a row without the world having to step (they keep each other busy: a livelock).
  explicit Lockstep(std::function<bool()> step, uint64_t max_turns_without_step = 0)
      : step_(std::move(step)), max_turns_(max_turns_without_step) {}
  // Must not be destroyed while a participant is unfinished (after a failed Run the process
  // has to end: see Run).
  ~Lockstep();
  Lockstep(const Lockstep&) = delete;
  Lockstep& operator=(const Lockstep&) = delete;

  // Adds a participant running `body`; it starts inside the next Run, or, spawned by a
  // participant, in the Run under way.
  void Spawn(std::function<void()> body);
  // Runs the participants to completion. FailedPrecondition when the world stalled while
  // some still waited: those threads stay blocked, so the caller must report and exit.
  absl::Status Run();
  // Returns once `done()` holds. A participant hands control to the driver meanwhile; any
  // other caller steps the world itself. `done` is evaluated on the driver's thread.
  void Wait(const std::function<bool()>& done);

 private:
  struct Participant {
    std::function<void()> body;
    const std::function<bool()>* waiting_for = nullptr;  // while in Wait
    bool started = false, finished = false;
    uint32_t spins = 0;  // Waits in a row that returned at once, without the world stepping
    std::condition_variable cv;
    std::thread thread;
  };
  // Hands control to `p` and returns when it waits or finished. Holds `l` on mu_.
  void Resume(Participant& p, std::unique_lock<std::mutex>& l);

  const std::function<bool()> step_;
  const uint64_t max_turns_;
  std::mutex mu_;
  std::condition_variable driver_cv_;
  Participant* running_ = nullptr;  // guarded by mu_; null: the driver runs
  std::deque<std::unique_ptr<Participant>> participants_;
};

}  // namespace unloadkv::sim

#endif  // UNLOADKV_TRANSPORT_SIM_LOCKSTEP_H_
