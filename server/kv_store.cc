#include "server/kv_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/field_record.h"
#include "transport/base/buggify.h"

namespace unloadkv::server {

KvStore::KvStore(char* arena, size_t arena_bytes, uint64_t max_grant_bytes_per_client)
    : arena_(arena),
      arena_bytes_(arena_bytes),
      max_grant_bytes_per_client_(max_grant_bytes_per_client),
      slabs_(arena_bytes) {}

absl::StatusOr<std::vector<KvStore::Grant>> KvStore::GrantSlots(uint64_t client, uint32_t size,
                                                                uint32_t count, bool* over_quota) {
  if (over_quota != nullptr) *over_quota = false;
  if (absl::Status st = proto::CheckValueSize(size); !st.ok()) return st;
  if (count < 1 || count > kMaxGrantsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("grant count ", count, "; ask for 1..", kMaxGrantsPerRequest));
  }
  // Fault point: no room (the client must report it and change nothing).
  if (UNLOADKV_BUGGIFY("store: the arena is full")) {
    return absl::ResourceExhaustedError("arena full (injected)");
  }
  MutexLock l(&mu_);
  ClientGrants& held = grants_per_client_[client];
  if (held.count + count > kMaxGrantsPerClient) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "connection holds ", held.count, " unused grants; at most ", kMaxGrantsPerClient));
  }
  if (max_grant_bytes_per_client_ > 0) {
    // As many slots as fit under the quota (fewer are fine: the client asks again later).
    const uint64_t slot_bytes = proto::SlotClassCapacity(proto::SlotClassOf(size));
    const uint64_t room =
        held.bytes < max_grant_bytes_per_client_ ? max_grant_bytes_per_client_ - held.bytes : 0;
    if (room < slot_bytes) {
      if (over_quota != nullptr) *over_quota = true;
      return absl::ResourceExhaustedError(
          absl::StrCat("connection holds ", held.bytes, " bytes of unused grants; a ", slot_bytes,
                       "-byte slot more would pass the limit (--max_grant_bytes_per_connection=",
                       max_grant_bytes_per_client_, "); PUT or drop some first"));
    }
    count = static_cast<uint32_t>(std::min<uint64_t>(count, room / slot_bytes));
  }
  std::vector<Grant> out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    absl::StatusOr<Slot> s = slabs_.Allocate(size);
    if (!s.ok()) {
      if (out.empty()) return s.status();
      break;  // a partial grant: what the arena has
    }
    Grant g{next_grant_++, *s};
    grants_[g.id] = Granted{client, g.slot};
    ++held.count;
    held.bytes += g.slot.capacity;
    out.push_back(g);
  }
  return out;
}

absl::StatusOr<uint64_t> KvStore::Put(uint64_t client, absl::string_view key, uint64_t grant_id,
                                      uint32_t value_size) {
  absl::StatusOr<Mutation> m = PreparePut(client, key, grant_id, value_size);
  if (!m.ok()) return m.status();
  Commit(*m);
  return m->version;
}

absl::StatusOr<Slot> KvStore::TakeGrantLocked(uint64_t client, uint64_t grant_id, uint32_t size) {
  auto g = grants_.find(grant_id);
  if (g == grants_.end() || g->second.client != client) {
    return absl::FailedPreconditionError(
        absl::StrCat("stale grant ", grant_id, ": not an unused grant of this connection"));
  }
  if (size > g->second.slot.capacity) {
    return absl::FailedPreconditionError(absl::StrCat("value of ", size, " bytes over its slot's ",
                                                      g->second.slot.capacity, " bytes"));
  }
  const Slot slot = g->second.slot;
  ClientGrants& held = grants_per_client_[client];
  --held.count;
  held.bytes -= slot.capacity;
  grants_.erase(g);
  return slot;
}

void KvStore::AddPendingLocked(const Mutation& m) {
  Pending& p = pending_[m.key];
  ++p.count;
  p.op = m.op;
  p.slot = m.slot;
  p.size = m.size;
}

absl::StatusOr<KvStore::Mutation> KvStore::PreparePut(uint64_t client, absl::string_view key,
                                                      uint64_t grant_id, uint32_t value_size) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  MutexLock l(&mu_);
  absl::StatusOr<Slot> slot = TakeGrantLocked(client, grant_id, value_size);
  if (!slot.ok()) return slot.status();
  Mutation m{Mutation::Op::kPut, std::string(key), *slot, value_size, ++version_};
  AddPendingLocked(m);
  return m;
}

absl::StatusOr<KvStore::Mutation> KvStore::PrepareMerge(uint64_t client, absl::string_view key,
                                                        uint64_t grant_id, uint32_t update_size) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  MutexLock l(&mu_);
  absl::StatusOr<Slot> taken = TakeGrantLocked(client, grant_id, update_size);
  if (!taken.ok()) return taken.status();
  const Slot update_slot = *taken;
  // The update is read out of its slot once, here; the slot is free again when this returns.
  struct FreeUpdate {
    SlabArena& slabs;
    Slot slot;
    ~FreeUpdate() { slabs.Free(slot); }
  } free_update{slabs_, update_slot};
  return MergeLocked(key, absl::string_view(arena_ + update_slot.offset, update_size));
}

absl::StatusOr<KvStore::Mutation> KvStore::PrepareMergeCopy(absl::string_view key,
                                                            absl::string_view update) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  if (absl::Status st = proto::CheckValueSize(update.size()); !st.ok()) return st;
  MutexLock l(&mu_);
  return MergeLocked(key, update);
}

absl::StatusOr<KvStore::Mutation> KvStore::MergeLocked(absl::string_view key,
                                                       absl::string_view update) {
  absl::string_view base;
  if (auto p = pending_.find(key); p != pending_.end()) {
    if (p->second.op == Mutation::Op::kPut) {
      base = absl::string_view(arena_ + p->second.slot.offset, p->second.size);
    }
  } else if (auto e = index_.find(key); e != index_.end()) {
    base = absl::string_view(arena_ + e->second.slot.offset, e->second.size);
  }
  if (absl::StatusOr<proto::FieldViews> u = proto::DecodeFieldRecord(update); !u.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("merge: ", u.status().message()));
  }
  absl::StatusOr<std::string> merged = proto::MergeFieldRecords(base, update);
  if (!merged.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "merge: the key's value is not a field record (", merged.status().message(), ")"));
  }
  if (absl::Status st = proto::CheckValueSize(merged->size()); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("merge: merged record: ", st.message()));
  }
  absl::StatusOr<Slot> slot = slabs_.Allocate(static_cast<uint32_t>(merged->size()));
  if (!slot.ok()) return slot.status();
  std::memcpy(arena_ + slot->offset, merged->data(), merged->size());
  Mutation m{Mutation::Op::kPut, std::string(key), *slot, static_cast<uint32_t>(merged->size()),
             ++version_};
  AddPendingLocked(m);
  return m;
}

absl::StatusOr<KvStore::Mutation> KvStore::PrepareCopy(absl::string_view key,
                                                       absl::string_view value, uint64_t version) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  if (absl::Status st = proto::CheckValueSize(value.size()); !st.ok()) return st;
  MutexLock l(&mu_);
  absl::StatusOr<Slot> slot = slabs_.Allocate(static_cast<uint32_t>(value.size()));
  if (!slot.ok()) return slot.status();
  std::memcpy(arena_ + slot->offset, value.data(), value.size());
  version_ = std::max(version_, version);
  Mutation m{Mutation::Op::kPut, std::string(key), *slot, static_cast<uint32_t>(value.size()),
             ++version_};
  AddPendingLocked(m);
  return m;
}

absl::StatusOr<KvStore::Mutation> KvStore::PrepareDelete(absl::string_view key) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  MutexLock l(&mu_);
  if (index_.find(key) == index_.end() && !pending_.contains(key)) {
    return absl::NotFoundError("no such key");
  }
  Mutation m{Mutation::Op::kDelete, std::string(key), Slot(), 0, ++version_};
  AddPendingLocked(m);
  return m;
}

bool KvStore::Commit(const Mutation& m) {
  MutexLock l(&mu_);
  EndPendingLocked(m.key);
  return CommitLocked(m);
}

void KvStore::EndPendingLocked(const std::string& key) {
  auto it = pending_.find(key);
  if (it != pending_.end() && --it->second.count == 0) pending_.erase(it);
}

bool KvStore::CommitLocked(const Mutation& m) {
  auto it = index_.find(m.key);
  if (m.op == Mutation::Op::kDelete) {
    if (it == index_.end()) return false;  // deleted by a mutation committed in between
    slabs_.Free(it->second.slot);
    index_.erase(it);
    return true;
  }
  const Entry e{m.slot, m.size, m.version};
  if (it == index_.end()) {
    index_.emplace(m.key, e);
  } else {
    slabs_.Free(it->second.slot);
    it->second = e;
  }
  return true;
}

void KvStore::Abandon(const Mutation& m) {
  MutexLock l(&mu_);
  EndPendingLocked(m.key);
  if (m.op == Mutation::Op::kPut) slabs_.Free(m.slot);
}

absl::Status KvStore::ApplyMirrored(const Mutation& m) {
  if (absl::Status st = proto::CheckKey(m.key); !st.ok()) return st;
  MutexLock l(&mu_);
  if (m.op == Mutation::Op::kPut) {
    if (m.size > m.slot.capacity || m.slot.offset + m.slot.capacity > arena_bytes_ ||
        !slabs_.Reserve(m.slot)) {
      return absl::FailedPreconditionError(absl::StrCat("mirrored slot at offset ", m.slot.offset,
                                                        " (", m.slot.capacity,
                                                        " bytes) is not free in this arena"));
    }
  }
  version_ = std::max(version_, m.version);
  CommitLocked(m);
  return absl::OkStatus();
}

std::vector<KvStore::Mutation> KvStore::Snapshot() const {
  MutexLock l(&mu_);
  std::vector<Mutation> out;
  out.reserve(index_.size());
  for (const auto& [key, e] : index_) {
    out.push_back(Mutation{Mutation::Op::kPut, key, e.slot, e.size, e.version});
  }
  return out;
}

std::vector<KvStore::Mutation> KvStore::Snapshot(absl::string_view start,
                                                 absl::string_view end) const {
  MutexLock l(&mu_);
  std::vector<Mutation> out;
  for (auto it = index_.lower_bound(start); it != index_.end(); ++it) {
    if (!end.empty() && it->first >= end) break;
    out.push_back(Mutation{Mutation::Op::kPut, it->first, it->second.slot, it->second.size,
                           it->second.version});
  }
  return out;
}

std::vector<std::string> KvStore::KeysOutside(absl::string_view start, absl::string_view end,
                                              size_t limit) const {
  MutexLock l(&mu_);
  std::vector<std::string> out;
  for (auto it = index_.begin(); it != index_.end() && out.size() < limit; ++it) {
    if (it->first >= start) break;
    out.push_back(it->first);
  }
  if (!end.empty()) {
    for (auto it = index_.lower_bound(end); it != index_.end() && out.size() < limit; ++it) {
      out.push_back(it->first);
    }
  }
  return out;
}

KvStore::Size KvStore::Measure() const {
  MutexLock l(&mu_);
  Size out;
  for (const auto& [key, e] : index_) out.live_bytes += e.size;
  out.keys = index_.size();
  // The key holding the halfway byte starts the right half; never the first key, so that
  // both halves keep one.
  uint64_t through = 0;
  for (auto it = index_.begin(); it != index_.end(); ++it) {
    through += it->second.size;
    if (2 * through <= out.live_bytes) continue;
    if (it == index_.begin()) ++it;
    if (it != index_.end()) out.median_key = it->first;
    break;
  }
  return out;
}

void KvStore::Clear() {
  MutexLock l(&mu_);
  index_.clear();
  pending_.clear();
  grants_.clear();
  grants_per_client_.clear();
  slabs_ = SlabArena(arena_bytes_);
}

uint64_t KvStore::version() const {
  MutexLock l(&mu_);
  return version_;
}

absl::StatusOr<KvStore::Value> KvStore::Get(absl::string_view key) const {
  Value v;
  absl::StatusOr<uint64_t> version = GetInto(key, &v.bytes);
  if (!version.ok()) return version.status();
  v.version = *version;
  return v;
}

absl::StatusOr<uint64_t> KvStore::GetInto(absl::string_view key, std::string* value) const {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  MutexLock l(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return absl::NotFoundError("no such key");
  const Entry& e = it->second;
  value->assign(arena_ + e.slot.offset, e.size);
  return e.version;
}

absl::StatusOr<uint64_t> KvStore::Delete(absl::string_view key) {
  absl::StatusOr<Mutation> m = PrepareDelete(key);
  if (!m.ok()) return m.status();
  if (!Commit(*m)) return absl::NotFoundError("no such key");
  return m->version;
}

absl::StatusOr<KvStore::ScanResult> KvStore::Scan(absl::string_view start, absl::string_view end,
                                                  uint32_t limit) const {
  if (limit < 1 || limit > kMaxScanLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("scan limit ", limit, "; ask for 1..", kMaxScanLimit));
  }
  if (start.size() > kMaxKeyBytes || end.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("scan bounds are keys of at most ", kMaxKeyBytes, " bytes"));
  }
  ScanResult r;
  size_t bytes = 0;
  MutexLock l(&mu_);
  for (auto it = index_.lower_bound(start); it != index_.end(); ++it) {
    if (!end.empty() && it->first >= end) break;
    const size_t cost = it->first.size() + it->second.size + 8;
    if (r.items.size() == limit || (!r.items.empty() && bytes + cost > kScanResponseBudget)) {
      r.more = true;
      break;
    }
    bytes += cost;
    r.items.emplace_back(it->first, std::string(arena_ + it->second.slot.offset, it->second.size));
  }
  return r;
}

size_t KvStore::DropClient(uint64_t client) {
  MutexLock l(&mu_);
  // Freed in grant order, not the hash map's: where later values land must not depend on it.
  std::vector<std::pair<uint64_t, Slot>> freed;
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (it->second.client == client) {
      freed.emplace_back(it->first, it->second.slot);
      grants_.erase(it++);
    } else {
      ++it;
    }
  }
  std::sort(freed.begin(), freed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [grant, slot] : freed) slabs_.Free(slot);
  grants_per_client_.erase(client);
  return freed.size();
}

bool KvStore::RevokeGrant(uint64_t client, uint64_t grant_id) {
  MutexLock l(&mu_);
  absl::StatusOr<Slot> slot = TakeGrantLocked(client, grant_id, 0);
  if (!slot.ok()) return false;
  slabs_.Free(*slot);
  return true;
}

KvStore::Stats KvStore::stats() const {
  MutexLock l(&mu_);
  return Stats{index_.size(), slabs_.capacity_bytes(), slabs_.used_bytes(), grants_.size()};
}

}  // namespace unloadkv::server
