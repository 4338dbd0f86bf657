// What both simulated worlds (KvWorld, ClusterWorld) give the SDK clients they embed: the
// pollers the world calls whenever it moved, and a ClientEmbedding on a device of the fabric,
// in its virtual time, stepped by its Lockstep.
//
// Thread-safety: none; a world runs one participant at a time.
#ifndef UNLOADKV_TESTS_SIM_SIM_CLIENTS_H_
#define UNLOADKV_TESTS_SIM_SIM_CLIENTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "client/client.h"
#include "client/client_hooks.h"
#include "transport/sim/fabric.h"
#include "transport/sim/lockstep.h"

namespace unloadkv::world {

// Polling functions by handle, called in the order they were added.
class Pollers {
 public:
  uint64_t Add(std::function<int()> poll) {
    polls_.emplace(next_, std::move(poll));
    return next_++;
  }
  void Remove(uint64_t handle) { polls_.erase(handle); }
  // Calls each; returns the work they did.
  int PollAll() {
    int work = 0;
    for (auto& [handle, poll] : polls_) work += poll();
    return work;
  }

 private:
  std::map<uint64_t, std::function<int()>> polls_;
  uint64_t next_ = 1;
};

// An embedding for a client on `device` (of `fabric`), waiting in `lockstep` and polled through
// `pollers` (all must outlive the client); `bootstrap` and the optional fields are the
// caller's to set.
inline std::unique_ptr<ClientEmbedding> SimClientEmbedding(rnic::Device* device,
                                                           const sim::Fabric& fabric,
                                                           sim::Lockstep& lockstep,
                                                           Pollers& pollers) {
  auto e = std::make_unique<ClientEmbedding>();
  e->device = device;
  e->clock = &fabric.clock();
  e->wait = [&lockstep](const std::function<bool()>& done) { lockstep.Wait(done); };
  e->add_poller = [&pollers](std::function<int()> poll) { return pollers.Add(std::move(poll)); };
  e->remove_poller = [&pollers](uint64_t handle) { pollers.Remove(handle); };
  return e;
}

}  // namespace unloadkv::world

#endif  // UNLOADKV_TESTS_SIM_SIM_CLIENTS_H_
