#include "transport/sim/lockstep.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"

namespace unloadkv::sim {
namespace {

// The participant the calling thread runs (null on every other thread).
thread_local void* tls_participant = nullptr;

// Waits in a row that may return at once before the participant counts as livelocked. A
// participant whose condition holds already comes back a few times at most (a node's control
// loop after its own map change); one that never waits spins forever.
constexpr uint32_t kMaxSpins = 10'000;

}  // namespace

Lockstep::~Lockstep() {
  for (std::unique_ptr<Participant>& p : participants_) {
    if (!p->thread.joinable()) continue;
    if (p->finished) {
      p->thread.join();
    } else {
      // Stalled (Run failed): blocked for good on its condition variable, which therefore
      // must never be destroyed (that would wait for the waiter). The process is ending.
      p->thread.detach();
      static auto* stalled = new std::vector<Participant*>();  // reachable: not a leak
      stalled->push_back(p.release());
    }
  }
}

void Lockstep::Spawn(std::function<void()> body) {
  std::lock_guard<std::mutex> l(mu_);
  participants_.push_back(std::make_unique<Participant>());
  participants_.back()->body = std::move(body);
}

void Lockstep::Resume(Participant& p, std::unique_lock<std::mutex>& l) {
  running_ = &p;
  if (!p.started) {
    p.started = true;
    p.thread = std::thread([this, &p] {
      tls_participant = &p;
      {
        std::unique_lock<std::mutex> me(mu_);
        p.cv.wait(me, [&] { return running_ == &p; });
      }
      p.body();
      std::lock_guard<std::mutex> me(mu_);
      p.finished = true;
      running_ = nullptr;
      driver_cv_.notify_one();
    });
  }
  p.cv.notify_one();
  driver_cv_.wait(l, [&] { return running_ == nullptr; });
}

absl::Status Lockstep::Run() {
  std::unique_lock<std::mutex> l(mu_);
  uint64_t turns = 0;  // since the last step
  while (true) {
    bool left = false, resumed = false;
    // By index: a participant may Spawn another while it runs (the deque then grows; its
    // elements stay where they are).
    for (size_t i = 0; i < participants_.size(); ++i) {
      Participant* p = participants_[i].get();
      if (p->finished) continue;
      left = true;
      if (!p->started || (*p->waiting_for)()) {
        Resume(*p, l);
        resumed = true;
        ++turns;
      }
    }
    if (!left) break;
    if (max_turns_ > 0 && turns > max_turns_) {
      return absl::FailedPreconditionError(
          absl::StrCat("simulation livelocked: participants resumed ", turns,
                       " times without the world having to advance"));
    }
    if (resumed) continue;
    turns = 0;
    l.unlock();  // the world's step runs callbacks that may take other locks
    const bool stepped = step_();
    l.lock();
    if (!stepped) {
      return absl::FailedPreconditionError(
          "simulation stalled: participants wait for something that can never happen");
    }
  }
  for (std::unique_ptr<Participant>& p : participants_) {
    if (p->thread.joinable()) p->thread.join();
  }
  participants_.clear();
  return absl::OkStatus();
}

void Lockstep::Wait(const std::function<bool()>& done) {
  auto* self = static_cast<Participant*>(tls_participant);
  if (self == nullptr) {
    while (!done()) {
      if (!step_()) {
        std::fprintf(stderr, "lockstep: simulation stalled inside Wait; aborting\n");
        std::abort();
      }
    }
    return;
  }
  std::unique_lock<std::mutex> l(mu_);
  if (done()) {
    // A participant whose condition always holds at once never lets the world step: a
    // livelock that would hang the process (found by cluster_sim --lost_answers without
    // ClusterNode's lost-answer rule: a node whose every control round asked for the next).
    if (++self->spins > kMaxSpins) {
      std::fprintf(stderr,
                   "lockstep: a participant's Wait held at once %u times in a row without the "
                   "world stepping (a livelock); aborting\n",
                   kMaxSpins);
      std::abort();
    }
    return;
  }
  self->spins = 0;
  self->waiting_for = &done;
  running_ = nullptr;
  driver_cv_.notify_one();
  self->cv.wait(l, [&] { return running_ == self; });
  self->waiting_for = nullptr;
}

}  // namespace unloadkv::sim
