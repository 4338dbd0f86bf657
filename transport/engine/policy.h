// Path policies: which path each write takes. One policy object per connection.
#ifndef UNLOADKV_TRANSPORT_ENGINE_POLICY_H_
#define UNLOADKV_TRANSPORT_ENGINE_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/engine/path.h"
#include "transport/rnic/device.h"

namespace unloadkv::engine {

class TargetModel;

// What a policy decided for one write; handed back with the write's observed latency.
struct Decision {
  Path path = Path::kOffload;
  uint16_t cell = 0;  // policy-private bookkeeping (which estimate the write informs)
  uint8_t tag = 0;    // policy-private bookkeeping (e.g. a probe write)
  // The policy needs this write's latency: the engine posts it signaled even when it could go
  // quietly (WriteOptions::lazy_completion), so that it ends in Observe unless it fails.
  bool observe = false;
  uint32_t ahead = 0;  // policy-private bookkeeping (e.g. the writes in flight when decided)
};

// What the engine saw of one write that completed signaled.
struct WriteTiming {
  absl::Duration latency;  // post to completion
  // Not posted when Write returned: it waited for room in the send queue, a staging slot or
  // an earlier write (the connection is backlogged: latency then hides what a path costs).
  bool waited = false;
  // Decided to posted: how long the write waited, after the policy routed it, for a staging
  // slot, credits or an earlier write (0 when it went at once).
  absl::Duration held;
};

// What to do with a write the policy routes to unload while every staging slot is in use.
enum class FullRingAction { kWait, kOffload };

// Contract: Decide, Observe, Unobserved and ObserveRequest are called one at a time (under the
// connection's lock), must not block or allocate, and must cost well under a microsecond. A
// policy learns only from what it is told here (addresses, sizes, observed latencies); it never
// sees the NIC or its model.
class PathPolicy {
 public:
  virtual ~PathPolicy() = default;
  virtual absl::string_view name() const = 0;
  // `remote_addr`/`length` describe the write; `unload_possible` is false when the write does
  // not fit a staging slot (the result must then be kOffload). Called when the write first may
  // be posted (the send queue has room and every earlier write was posted), in write order: a
  // write that waits is decided when its turn comes, with what was learned meanwhile.
  virtual Decision Decide(uint64_t remote_addr, uint32_t length, bool unload_possible) = 0;
  // The write decided as `d` completed; `t` says after how long, and whether it had waited.
  virtual void Observe(const Decision& d, const WriteTiming& t) {}
  // The write decided as `d` ended without a latency to report: it failed, or it completed
  // quietly (WriteOptions::lazy_completion, posted unsignaled), so the engine learned of it
  // only later. Every decision ends in exactly one of Observe and Unobserved.
  virtual void Unobserved(const Decision& d) {}
  // A request of the application on this connection (an RPC: the message and its reply)
  // completed after `latency`, whatever writes it waited for. What the application waits for,
  // where a write's own completion may not show it (docs/engine.md, "Policies"). Optional:
  // connections without requests never call it.
  virtual void ObserveRequest(absl::Duration latency) {}
  virtual FullRingAction OnRingFull() const { return FullRingAction::kWait; }
  // The connection connected to a peer device whose model (target_model.h) the engine shares
  // among every connection it has into that device. Called once, before the first Decide; a
  // policy that learns may read and update the model (lock-free) from Decide and Observe.
  virtual void AttachTarget(std::shared_ptr<TargetModel> target) {}
  // What the peer device said of its translation cache when the connection connected (kUnknown:
  // nothing). Called once, before the first Decide.
  virtual void OnTargetHint(rnic::TranslationCacheState cache) {}
  // How many times the preferred path of some class changed.
  virtual uint64_t switches() const { return 0; }
};

class OffloadPolicy : public PathPolicy {
 public:
  absl::string_view name() const override { return "offload"; }
  Decision Decide(uint64_t, uint32_t, bool) override { return {Path::kOffload, 0}; }
};

class UnloadPolicy : public PathPolicy {
 public:
  absl::string_view name() const override { return "unload"; }
  Decision Decide(uint64_t, uint32_t, bool unload_possible) override {
    return {unload_possible ? Path::kUnload : Path::kOffload, 0};
  }
};

// Sends a fixed fraction of the writes that fit a slot to unload, spread evenly (a baseline:
// the best fixed split bounds what any policy can reach on a steady workload).
class SplitPolicy : public PathPolicy {
 public:
  explicit SplitPolicy(double unload_fraction) : fraction_(unload_fraction) {}
  absl::string_view name() const override { return "split"; }
  Decision Decide(uint64_t, uint32_t, bool unload_possible) override {
    if (!unload_possible) return {Path::kOffload, 0};
    acc_ += fraction_;
    if (acc_ >= 1.0) {
      acc_ -= 1.0;
      return {Path::kUnload, 0};
    }
    return {Path::kOffload, 0};
  }

 private:
  double fraction_;
  double acc_ = 0;
};

// Offloads a connection's first N writes that fit a slot, then unloads every one (a baseline:
// the best a policy can do where unloading pays, if it must see N offloaded writes before it
// unloads; docs/sim-kv.md, "Short runs").
class UnloadAfterPolicy : public PathPolicy {
 public:
  explicit UnloadAfterPolicy(uint64_t offloaded_first) : left_(offloaded_first) {}
  absl::string_view name() const override { return "unload_after"; }
  Decision Decide(uint64_t, uint32_t, bool unload_possible) override {
    if (!unload_possible) return {Path::kOffload, 0};
    if (left_ > 0) {
      --left_;
      return {Path::kOffload, 0};
    }
    return {Path::kUnload, 0};
  }

 private:
  uint64_t left_;
};

// "offload", "unload", "adaptive", "split:F" (0 <= F <= 1) or "unload_after:N" (N >= 0 an
// integer); anything else is InvalidArgument naming the choices.
absl::StatusOr<std::unique_ptr<PathPolicy>> MakePolicy(absl::string_view name);

}  // namespace unloadkv::engine

#endif  // UNLOADKV_TRANSPORT_ENGINE_POLICY_H_
