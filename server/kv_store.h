// The KV state of one server: the ordered index (key -> slot, size, version), slot grants
// held by client connections, and the slab arena they are carved from.
//
// A value reaches the store in two steps (docs/kv.md, "PUT"): GrantSlots hands a client
// free slots; the client writes a value into one through the write engine and then calls Put
// naming the grant. Put publishes the slot under the key and frees the key's old slot. A grant
// is used at most once and only by the client it was given to; anything else is refused and
// changes nothing. Until Put, a written slot is invisible, so a client that dies between its
// value write and its Put leaves no trace (DropClient returns its slots).
//
// Trust model: the store protects against stale and forged *grants*; which bytes a client can
// write with RDMA is decided outside it, by a memory window per grant on the client's
// connection and the same grants checked on the unload path (grant_windows.h). Who may connect
// at all is the auth file's decision (admission.h); what an authenticated client can still do
// is in docs/security.md.
//
// Replication (docs/cluster.md) splits a write in two: Prepare* decides it (consumes the grant,
// assigns the version) without making it visible; Commit makes it visible once every backup
// applied it. Backups apply their primary's mutations with ApplyMirrored, reserving the very
// slots the primary chose, so that their arenas mirror the primary's layout. Put and Delete
// are Prepare + Commit at once (a shard without backups).
//
// Thread-safety: every method may be called from any thread.
#ifndef UNLOADKV_SERVER_KV_STORE_H_
#define UNLOADKV_SERVER_KV_STORE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/limits.h"
#include "server/slab_arena.h"
#include "transport/base/mutex.h"

namespace unloadkv::server {

using proto::kMaxGrantsPerClient;
using proto::kMaxGrantsPerRequest;
using proto::kMaxKeyBytes;
using proto::kMaxScanLimit;
using proto::kMaxValueBytes;
using proto::kScanResponseBudget;

class KvStore {
 public:
  struct Grant {
    uint64_t id = 0;
    Slot slot;
  };
  struct Value {
    std::string bytes;
    uint64_t version = 0;
  };
  struct ScanResult {
    std::vector<std::pair<std::string, std::string>> items;
    bool more = false;
  };
  struct Stats {
    uint64_t keys = 0;
    uint64_t arena_bytes = 0;
    // Live values and outstanding grants; the rest (arena_bytes - arena_used_bytes) is free
    // chunks and free slots of size classes, all usable by a PUT of that size.
    uint64_t arena_used_bytes = 0;
    uint64_t grants_outstanding = 0;
  };

  // A write decided but not yet visible.
  struct Mutation {
    enum class Op { kPut, kDelete };
    Op op = Op::kPut;
    std::string key;
    Slot slot;          // kPut: where the value is
    uint32_t size = 0;  // kPut: value bytes
    uint64_t version = 0;
  };

  // `arena` is `arena_bytes` of memory clients write values into (and PrepareMerge writes
  // merged records into); not owned, must outlive the store. A client holds at most
  // `max_grant_bytes_per_client` bytes of slots in unused grants (0: no limit but the arena).
  KvStore(char* arena, size_t arena_bytes, uint64_t max_grant_bytes_per_client = 0);

  // Up to `count` slots that each hold `size` bytes, granted to `client`: as many as the arena
  // and the client's quota allow, at least one; ResourceExhausted when none (or the client
  // holds too many grants), with *over_quota (nullable) set when the byte quota was the reason.
  absl::StatusOr<std::vector<Grant>> GrantSlots(uint64_t client, uint32_t size, uint32_t count,
                                                bool* over_quota = nullptr);
  // Publishes the value `client` wrote into grant `grant_id` under `key`; returns its version.
  // FailedPrecondition for a grant that is unknown, used, or another client's, or a size over
  // the slot; InvalidArgument for a bad key.
  absl::StatusOr<uint64_t> Put(uint64_t client, absl::string_view key, uint64_t grant_id,
                               uint32_t value_size);
  absl::StatusOr<Value> Get(absl::string_view key) const;
  // The same into `*value` (its capacity reused): the version, or Get's errors.
  absl::StatusOr<uint64_t> GetInto(absl::string_view key, std::string* value) const;

  // Put's first half: checks and consumes the grant and assigns the version; the value stays
  // invisible (Get returns the key's previous value) until Commit. Errors as Put's.
  absl::StatusOr<Mutation> PreparePut(uint64_t client, absl::string_view key, uint64_t grant_id,
                                      uint32_t value_size);
  // Delete's first half: NotFound when the key is absent and no prepared mutation of it is
  // pending (the answer is then final); otherwise whether it finds the key is decided when it
  // commits, after the mutations prepared before it.
  absl::StatusOr<Mutation> PrepareDelete(absl::string_view key);
  // Like PreparePut, but the grant holds a field record (proto/field_record.h) to merge into
  // the key's value: the latest prepared one if a mutation of the key is pending, else the
  // visible one (none: the update is the whole record). The merged record goes into a slot
  // this store allocates; the grant is spent and its slot freed whether or not the merge
  // succeeds. Errors: those of PreparePut; InvalidArgument when the update is not a field
  // record or the merged record is over the value limit; FailedPrecondition when the stored
  // value is not a field record; ResourceExhausted when the arena has no slot for the result.
  absl::StatusOr<Mutation> PrepareMerge(uint64_t client, absl::string_view key, uint64_t grant_id,
                                        uint32_t update_size);
  // PrepareMerge of an update the server holds (an inline PUT's): no grant. Errors as
  // PrepareMerge's, but for the grant's.
  absl::StatusOr<Mutation> PrepareMergeCopy(absl::string_view key, absl::string_view update);
  // A PUT of `value` under `key` copied in by the server itself (a merge copying another
  // shard's keys in; an inline PUT, with `version` 0): the value goes into a slot this store
  // allocates, at a version above `version` (the key's in the shard it comes from), so that a
  // key's versions only grow.
  // Errors: InvalidArgument for a bad key or size; ResourceExhausted when the arena has no
  // slot for it.
  absl::StatusOr<Mutation> PrepareCopy(absl::string_view key, absl::string_view value,
                                       uint64_t version);
  // Makes a prepared mutation visible (a PUT's old slot, or a deleted key's slot, is freed).
  // Prepared mutations must be committed in version order. Returns false for a DELETE that
  // found no key (it changed nothing: its answer is NotFound), true otherwise.
  bool Commit(const Mutation& m);
  // A prepared mutation that will never commit: a PUT's slot is freed.
  void Abandon(const Mutation& m);
  // A backup applies its primary's mutation: reserves the same slot (kPut) and frees the key's
  // old one, or removes the key (kDelete). FailedPrecondition, changing nothing, when the slot
  // is not free in this arena (the mirror is out of step).
  absl::Status ApplyMirrored(const Mutation& m);
  // The visible entries in key order, as mutations (kPut), for state transfer.
  std::vector<Mutation> Snapshot() const;
  // The same for keys in [start, end) only ("" end: unbounded).
  std::vector<Mutation> Snapshot(absl::string_view start, absl::string_view end) const;
  // Up to `limit` visible keys outside [start, end) ("" end: unbounded), in key order.
  std::vector<std::string> KeysOutside(absl::string_view start, absl::string_view end,
                                       size_t limit) const;
  // Forgets every key and grant (a backup about to receive a new state).
  void Clear();
  // The last version assigned or applied.
  uint64_t version() const;
  // The value bytes of a slot (for the primary's engine writes to backups).
  const char* arena() const { return arena_; }
  // Returns the version of the deletion.
  absl::StatusOr<uint64_t> Delete(absl::string_view key);
  // Keys in [start, end) (end empty: unbounded), at most `limit`, stopping early rather than
  // exceed kScanResponseBudget (but always returning at least one key when one exists).
  absl::StatusOr<ScanResult> Scan(absl::string_view start, absl::string_view end,
                                  uint32_t limit) const;
  // The client's connection ended: its outstanding grants are revoked and their slots freed.
  // Returns how many.
  size_t DropClient(uint64_t client);
  // Revokes one unused grant of `client` and frees its slot (its memory window could not be
  // bound); false when it is no unused grant of the client.
  bool RevokeGrant(uint64_t client, uint64_t grant_id);
  Stats stats() const;

  // What automatic placement weighs (ShardLoad): the live keys, their values' bytes, and the
  // median key: the one holding the halfway byte, or the second key when that is the first
  // ("" with fewer than two keys or no bytes), so a split there leaves each side a key. Walks every
  // key under the store's lock: O(keys); call it seldom (a placement interval), never per request.
  struct Size {
    uint64_t keys = 0;
    uint64_t live_bytes = 0;
    std::string median_key;
  };
  Size Measure() const;

 private:
  struct Entry {
    Slot slot;
    uint32_t size = 0;
    uint64_t version = 0;
  };
  struct Granted {
    uint64_t client = 0;
    Slot slot;
  };

  // Requires mu_. See Commit.
  bool CommitLocked(const Mutation& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. A prepared mutation of `key` ended (committed or abandoned).
  void EndPendingLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. `m` was prepared: counts it as pending and the latest of its key.
  void AddPendingLocked(const Mutation& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PrepareMerge's work once the update's bytes are at hand.
  absl::StatusOr<Mutation> MergeLocked(absl::string_view key, absl::string_view update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requires mu_. Spends grant `grant_id` of `client` for a value of `size` bytes and returns
  // its slot (now the caller's); FailedPrecondition, changing nothing, for a grant that is not
  // an unused one of `client` or a size over the slot.
  absl::StatusOr<Slot> TakeGrantLocked(uint64_t client, uint64_t grant_id, uint32_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct ClientGrants {
    size_t count = 0;
    uint64_t bytes = 0;  // slot capacity
  };

  char* const arena_;
  const size_t arena_bytes_;
  const uint64_t max_grant_bytes_per_client_;
  mutable Mutex mu_;
  SlabArena slabs_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<std::string, Entry> index_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Granted> grants_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, ClientGrants> grants_per_client_ ABSL_GUARDED_BY(mu_);
  // Keys with prepared, uncommitted mutations: how many, and the latest (a merge's base).
  struct Pending {
    int count = 0;
    Mutation::Op op = Mutation::Op::kPut;
    Slot slot;
    uint32_t size = 0;
  };
  absl::flat_hash_map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_grant_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_KV_STORE_H_
