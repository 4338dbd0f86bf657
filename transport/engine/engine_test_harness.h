// Test support for the write engine: two engines on the soft RNIC or the simulated fabric, a
// way to wait while they make progress, and a policy that routes writes by a script.
#ifndef UNLOADKV_TRANSPORT_ENGINE_ENGINE_TEST_HARNESS_H_
#define UNLOADKV_TRANSPORT_ENGINE_ENGINE_TEST_HARNESS_H_

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/base/logging.h"
#include "transport/engine/engine.h"
#include "transport/sim/fabric.h"
#include "transport/soft/soft_device.h"

namespace unloadkv::engine {

// Routes writes by a fixed script (cycled), to put writes on chosen paths.
class ScriptedPolicy : public PathPolicy {
 public:
  explicit ScriptedPolicy(std::vector<Path> script) : script_(std::move(script)) {}
  absl::string_view name() const override { return "scripted"; }
  Decision Decide(uint64_t, uint32_t, bool possible) override {
    Path p = script_[next_++ % script_.size()];
    return {possible ? p : Path::kOffload, 0};
  }

 private:
  std::vector<Path> script_;
  size_t next_ = 0;
};

std::unique_ptr<PathPolicy> Only(Path p) {
  return std::make_unique<ScriptedPolicy>(std::vector<Path>{p});
}

// Two engines on a backend, and a way to wait while they make progress.
class Harness {
 public:
  virtual ~Harness() = default;
  virtual rnic::Device& a() = 0;
  virtual rnic::Device& b() = 0;
  // A third device, for an engine that replaces b's in a test. Two started engines must not
  // share a caller-driven device: each would wait up to kIdleWait for completions the other's
  // Progress delivered (docs/engine.md, "Threads").
  virtual rnic::Device& c() = 0;
  virtual void Start(Engine& ea, Engine& eb) = 0;
  // Returns once `done()` holds or `timeout` (on the device clock) passes; false on timeout.
  virtual bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) = 0;
};

class SoftHarness : public Harness {
 public:
  // `ports`: SoftDevice::Options::ports of both devices.
  explicit SoftHarness(int ports = 1) {
    SetMinLogLevel(LogLevel::kError);
    soft::SoftDevice::Options o;
    o.ports = ports;
    a_ = std::move(*soft::SoftDevice::Create(o));
    b_ = std::move(*soft::SoftDevice::Create(o));
    c_ = std::move(*soft::SoftDevice::Create(o));
  }
  rnic::Device& a() override { return *a_; }
  rnic::Device& b() override { return *b_; }
  rnic::Device& c() override { return *c_; }
  void Start(Engine& ea, Engine& eb) override {
    ea.Start();
    eb.Start();
  }
  bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) override {
    absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Microseconds(200));
    }
    return true;
  }

 private:
  std::unique_ptr<soft::SoftDevice> a_, b_, c_;
};

class SimHarness : public Harness {
 public:
  SimHarness()
      : a_(fabric_.CreateDevice()), b_(fabric_.CreateDevice()), c_(fabric_.CreateDevice()) {
    SetMinLogLevel(LogLevel::kError);
  }
  rnic::Device& a() override { return *a_; }
  rnic::Device& b() override { return *b_; }
  rnic::Device& c() override { return *c_; }
  void Start(Engine& ea, Engine& eb) override {
    ea_ = &ea;
    eb_ = &eb;
  }
  bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) override {
    int64_t deadline = fabric_.now_ns() + absl::ToInt64Nanoseconds(timeout);
    while (!done()) {
      if (fabric_.now_ns() > deadline) return false;
      int n = ea_->PollOnce() + eb_->PollOnce();
      if (n == 0) {
        if (fabric_.idle()) return done();
        fabric_.Run(deadline - fabric_.now_ns());
      }
    }
    return true;
  }

 private:
  sim::Fabric fabric_;
  std::unique_ptr<rnic::Device> a_, b_, c_;
  Engine* ea_ = nullptr;
  Engine* eb_ = nullptr;
};

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_ENGINE_TEST_HARNESS_H_
