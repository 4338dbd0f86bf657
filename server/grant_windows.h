// Memory protection of a node's slot grants (docs/security.md, "Memory protection"): each grant
// a client holds is a memory window bound to exactly its slot on that client's connection, so
// the NIC admits the client's offloaded writes into that slot only; the same grants, installed
// on the connection as its staged-write check, admit its unloaded writes. A PUT naming a grant
// ends the window before the value is published; a closed connection takes its windows along;
// a shard that stops being primary here closes the connections that hold windows into it.
#ifndef UNLOADKV_SERVER_GRANT_WINDOWS_H_
#define UNLOADKV_SERVER_GRANT_WINDOWS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/kv_store.h"
#include "transport/base/mutex.h"
#include "transport/base/object_pool.h"
#include "transport/engine/engine.h"
#include "transport/rnic/memory_region.h"
#include "transport/rnic/memory_window.h"

namespace unloadkv::server {

// One client connection's outstanding grant windows, as its staged-write check: a staged write
// is admitted only inside the slot of a window it names. Thread-safe (unload workers call
// Check concurrently with the server adding and removing windows).
class ConnectionGrants : public engine::StagedWriteCheck {
 public:
  void Add(uint32_t rkey, uint64_t addr, uint64_t length);
  void Remove(uint32_t rkey);
  rnic::AccessVerdict Check(uint32_t rkey, uint64_t addr, uint64_t length) const override;

 private:
  struct Range {
    uint64_t addr = 0, length = 0;
  };
  mutable Mutex mu_;
  absl::flat_hash_map<uint32_t, Range> ranges_ ABSL_GUARDED_BY(mu_);
};

// The windows of every grant on this node. Thread-safe: RPC handlers on engine workers, the
// server's loop (DropClient) and the cluster's control thread (RevokeShard) call it.
class GrantWindows {
 public:
  // `device` allocates the windows; it must outlive this object.
  explicit GrantWindows(rnic::Device* device) : device_(device) {}
  ~GrantWindows();

  // Binds one window per grant of `shard` (slots of `arena`, which starts at `arena_addr`) on
  // `conn`, the connection of `client`; `done` gets each grant's key, in order, once the binds
  // are posted: an answer sent on `conn` after that leaves behind them, so the keys work by
  // the time the client reads it. On failure the grants are revoked from `store` and `done`
  // gets why. `done` runs before Bind returns. `generation` is Generation(shard) read before
  // the caller saw the shard primary here and granted the slots: if RevokeShard ran since, the
  // grants are revoked and `done` gets UNAVAILABLE (no window may outlive the primary role).
  void Bind(const std::shared_ptr<engine::Connection>& conn, uint64_t client, uint32_t shard,
            uint64_t generation, KvStore& store, const std::vector<KvStore::Grant>& grants,
            const rnic::MemoryRegion& arena,
            std::function<void(absl::StatusOr<std::vector<uint32_t>>)> done);

  // How many times RevokeShard(shard) has run.
  uint64_t Generation(uint32_t shard) const;

  // A PUT of `client` names grant `grant_id` of `shard`: ends its window, then runs `then`
  // (where the grant is spent and the value published) once no byte can land through it
  // anymore. A grant with no window here (unknown, another client's, protection off) runs
  // `then` at once: the store refuses what it must. FailedPrecondition, running nothing, when a
  // PUT of the same grant is already ending it.
  absl::Status Release(uint64_t client, uint32_t shard, uint64_t grant_id,
                       std::function<void()> then);

  // The client's connection ended (failed or closed): its windows died with its QPs.
  void DropClient(uint64_t client);
  // The shard is no longer served as primary here (its arena may become a backup's mirror or
  // go away): every connection holding a window into it is closed, which returns once no
  // write through them can land, and their windows are forgotten.
  void RevokeShard(uint32_t shard);

  // The staged-write check of `client`'s connection (created on first use).
  std::shared_ptr<ConnectionGrants> ChecksFor(uint64_t client);
  size_t windows() const;
  // For tests and the simulation (a rogue that stole keys): the bound windows into `shard`.
  struct Live {
    uint64_t client = 0;
    uint32_t rkey = 0;
    uint64_t addr = 0, length = 0;
  };
  std::vector<Live> LiveWindows(uint32_t shard) const;

 private:
  struct Key {
    uint32_t shard;
    uint64_t grant;
    bool operator==(const Key& o) const { return shard == o.shard && grant == o.grant; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.shard, k.grant);
    }
  };
  struct Entry {
    uint64_t client = 0;
    uint32_t rkey = 0;
    uint64_t addr = 0, length = 0;
    bool binding = false;    // its window is being bound: not usable yet
    bool releasing = false;  // a PUT is ending it
    std::unique_ptr<rnic::MemoryWindow> window;
    std::weak_ptr<engine::Connection> conn;
  };

  // A PUT's Release between its invalidation and `then`.
  struct Releasing {
    GrantWindows* windows = nullptr;
    Key key{};
    std::function<void()> then;
  };

  // Forgets an entry; its window goes to free_ when `invalidated` (unbound, reusable), else
  // back to the device (its binding must be dead).
  void Forget(const Key& key, bool invalidated);

  rnic::Device* const device_;
  mutable Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<ConnectionGrants>> checks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, uint64_t> generations_ ABSL_GUARDED_BY(mu_);
  // Unbound windows to bind again: allocating one per grant costs a device call each.
  static constexpr size_t kMaxFreeWindows = 4096;
  std::vector<std::unique_ptr<rnic::MemoryWindow>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_GRANT_WINDOWS_H_
