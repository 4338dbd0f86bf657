#include "server/kv_store.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::server {

KvStore::KvStore(const char* arena, size_t arena_bytes) : arena_(arena), slabs_(arena_bytes) {}

absl::StatusOr<std::vector<KvStore::Grant>> KvStore::GrantSlots(uint64_t client, uint32_t size,
                                                                uint32_t count) {
  if (absl::Status st = proto::CheckValueSize(size); !st.ok()) return st;
  if (count < 1 || count > kMaxGrantsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("grant count ", count, "; ask for 1..", kMaxGrantsPerRequest));
  }
  MutexLock l(&mu_);
  size_t& held = grants_per_client_[client];
  if (held + count > kMaxGrantsPerClient) {
    return absl::ResourceExhaustedError(
        absl::StrCat("connection holds ", held, " unused grants; at most ", kMaxGrantsPerClient));
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
    ++held;
    out.push_back(g);
  }
  return out;
}

absl::StatusOr<uint64_t> KvStore::Put(uint64_t client, absl::string_view key, uint64_t grant_id,
                                      uint32_t value_size) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  MutexLock l(&mu_);
  auto g = grants_.find(grant_id);
  if (g == grants_.end() || g->second.client != client) {
    return absl::FailedPreconditionError(
        absl::StrCat("stale grant ", grant_id, ": not an unused grant of this connection"));
  }
  if (value_size > g->second.slot.capacity) {
    return absl::FailedPreconditionError(absl::StrCat(
        "value of ", value_size, " bytes over its slot's ", g->second.slot.capacity, " bytes"));
  }
  Entry e{g->second.slot, value_size, ++version_};
  grants_.erase(g);
  --grants_per_client_[client];
  auto [it, inserted] = index_.try_emplace(std::string(key), e);
  if (!inserted) {
    slabs_.Free(it->second.slot);
    it->second = e;
  }
  return e.version;
}

absl::StatusOr<KvStore::Value> KvStore::Get(absl::string_view key) const {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  MutexLock l(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return absl::NotFoundError("no such key");
  const Entry& e = it->second;
  return Value{std::string(arena_ + e.slot.offset, e.size), e.version};
}

absl::StatusOr<uint64_t> KvStore::Delete(absl::string_view key) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return st;
  MutexLock l(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return absl::NotFoundError("no such key");
  slabs_.Free(it->second.slot);
  index_.erase(it);
  return ++version_;
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
  size_t dropped = 0;
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (it->second.client == client) {
      slabs_.Free(it->second.slot);
      grants_.erase(it++);
      ++dropped;
    } else {
      ++it;
    }
  }
  grants_per_client_.erase(client);
  return dropped;
}

KvStore::Stats KvStore::stats() const {
  MutexLock l(&mu_);
  return Stats{index_.size(), slabs_.capacity_bytes(), slabs_.used_bytes(), grants_.size()};
}

}  // namespace unloadkv::server
