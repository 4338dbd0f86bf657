#include "transport/cluster/memory_cluster_map.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "transport/cluster/map_records.h"

namespace unloadkv::cluster {

void MemoryCoordinator::ExpireLeases() {
  Notices notices;
  {
    MutexLock l(&mu_);
    ExpireLocked(&notices);
  }
  Deliver(notices);
}

int64_t MemoryCoordinator::revision() const {
  MutexLock l(&mu_);
  return revision_;
}

void MemoryCoordinator::ExpireLocked(Notices* notices) {
  const absl::Time now = clock_->Now();
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    // As etcd: one revision for all the keys a lease held.
    if (!it->second.keys.empty()) ++revision_;
    for (const std::string& key : it->second.keys) {
      keys_.erase(key);
      NoteChangeLocked(key, notices);
    }
    it = leases_.erase(it);
  }
}

void MemoryCoordinator::NoteChangeLocked(const std::string& key, Notices* notices) {
  for (const auto& w : watchers_) {
    if (!absl::StartsWith(key, w->prefix)) continue;
    const bool queued =
        std::any_of(notices->begin(), notices->end(), [&](const auto& n) { return n.first == w; });
    if (!queued) notices->emplace_back(w, revision_);
  }
}

void MemoryCoordinator::PutLocked(const std::string& key, std::string value, LeaseId lease,
                                  Notices* notices) {
  Entry& e = keys_[key];
  if (e.create_revision == 0) e.create_revision = revision_;
  if (e.lease != 0 && e.lease != lease) leases_[e.lease].keys.erase(key);
  e.value = std::move(value);
  e.mod_revision = revision_;
  e.lease = lease;
  if (lease != 0) leases_[lease].keys.insert(key);
  NoteChangeLocked(key, notices);
}

void MemoryCoordinator::DeleteLocked(const std::string& key, Notices* notices) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return;
  if (it->second.lease != 0) leases_[it->second.lease].keys.erase(key);
  keys_.erase(it);
  NoteChangeLocked(key, notices);
}

void MemoryCoordinator::Deliver(const Notices& notices) {
  for (const auto& [w, revision] : notices) {
    MutexLock l(&w->call_mu);
    if (w->active) w->on_change(revision);
  }
}

std::string MemoryClusterMap::Describe() const {
  return absl::StrCat("in-memory map, cluster ", cluster_);
}

absl::Status MemoryClusterMap::CheckReachable() const {
  if (reachable_.load()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(Describe(), ": unreachable (fault injected)"));
}

template <typename Fn>
auto MemoryClusterMap::Transact(Fn fn)
    -> decltype(fn(std::declval<MemoryCoordinator::Notices*>())) {
  MemoryCoordinator& c = *coordinator_;
  MemoryCoordinator::Notices notices;
  auto result = [&] {
    MutexLock l(&c.mu_);
    c.ExpireLocked(&notices);
    return fn(&notices);
  }();
  MemoryCoordinator::Deliver(notices);
  return result;
}

absl::StatusOr<ClusterView> MemoryClusterMap::Read() {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  int64_t revision = 0;
  std::vector<StoredKey> keys = Transact([&](MemoryCoordinator::Notices*) {
    std::vector<StoredKey> out;
    const std::string prefix = ClusterPrefix(cluster_);
    for (auto it = c.keys_.lower_bound(prefix);
         it != c.keys_.end() && absl::StartsWith(it->first, prefix); ++it) {
      out.push_back({it->first, it->second.value, it->second.mod_revision});
    }
    revision = c.revision_;
    return out;
  });
  return AssembleView(cluster_, revision, keys);
}

absl::StatusOr<int64_t> MemoryClusterMap::Create(int replicas,
                                                 const std::vector<ShardInfo>& shards) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::StatusOr<int64_t> {
    if (c.keys_.count(ConfigKey(cluster_)) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("cluster \"", cluster_, "\" already has a map in ", Describe()));
    }
    ++c.revision_;
    c.PutLocked(ConfigKey(cluster_), EncodeConfig(static_cast<int>(shards.size()), replicas, {}), 0,
                notices);
    for (const ShardInfo& s : shards) {
      c.PutLocked(ShardKey(cluster_, s.id), EncodeShard(s), 0, notices);
    }
    return c.revision_;
  });
}

absl::StatusOr<int64_t> MemoryClusterMap::UpdateShard(
    const ShardInfo& shard, const std::vector<std::string>& absent_nodes) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  absl::StatusOr<int64_t> rev =
      Transact([&](MemoryCoordinator::Notices* notices) -> absl::StatusOr<int64_t> {
        const std::string key = ShardKey(cluster_, shard.id);
        auto it = c.keys_.find(key);
        const int64_t stored = it == c.keys_.end() ? 0 : it->second.mod_revision;
        bool ok = stored == shard.mod_revision && stored != 0;
        for (const std::string& n : absent_nodes) {
          ok = ok && c.keys_.count(NodeKey(cluster_, n)) == 0;
        }
        if (!ok) {
          return absl::FailedPreconditionError(
              absl::StrCat("shard ", shard.id, " changed since revision ", shard.mod_revision,
                           " (or a node thought gone is registered); re-read the map"));
        }
        ++c.revision_;
        c.PutLocked(key, EncodeShard(shard), 0, notices);
        return c.revision_;
      });
  if (rev.ok() && answers_lost_.load()) {
    return absl::UnavailableError(
        absl::StrCat(Describe(), ": the answer was lost (fault injected; the write was applied)"));
  }
  return rev;
}

absl::StatusOr<int64_t> MemoryClusterMap::SplitShard(const ShardInfo& left, const ShardInfo& right,
                                                     const ClusterView& read) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  if (absl::Status s = CheckSplit(read, left, right); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::StatusOr<int64_t> {
    auto mod = [&c](const std::string& key) -> int64_t {
      auto it = c.keys_.find(key);
      return it == c.keys_.end() ? 0 : it->second.mod_revision;
    };
    const std::string left_key = ShardKey(cluster_, left.id);
    const std::string right_key = ShardKey(cluster_, right.id);
    const std::string config_key = ConfigKey(cluster_);
    if (mod(left_key) != left.mod_revision || left.mod_revision == 0 ||
        mod(config_key) != read.config_revision || mod(right_key) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", left.id, " or the config changed since revision ",
                       left.mod_revision, ", or shard ", right.id, " exists; re-read the map"));
    }
    ++c.revision_;
    c.PutLocked(left_key, EncodeShard(left), 0, notices);
    c.PutLocked(right_key, EncodeShard(right), 0, notices);
    c.PutLocked(config_key, EncodeConfig(read.shards + 1, read.replicas, read.policy), 0, notices);
    return c.revision_;
  });
}

absl::StatusOr<int64_t> MemoryClusterMap::MergeShards(const ShardInfo& merged, uint32_t right_id,
                                                      const ClusterView& read) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  if (absl::Status s = CheckMerge(read, merged, right_id); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::StatusOr<int64_t> {
    auto mod = [&c](const std::string& key) -> int64_t {
      auto it = c.keys_.find(key);
      return it == c.keys_.end() ? 0 : it->second.mod_revision;
    };
    const std::string left_key = ShardKey(cluster_, merged.id);
    const std::string right_key = ShardKey(cluster_, right_id);
    const std::string config_key = ConfigKey(cluster_);
    if (mod(left_key) != read.ShardById(merged.id)->mod_revision ||
        mod(right_key) != read.ShardById(right_id)->mod_revision ||
        mod(config_key) != read.config_revision) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", merged.id, ", shard ", right_id,
                       " or the config changed since they were read; re-read the map"));
    }
    ++c.revision_;
    c.PutLocked(left_key, EncodeShard(merged), 0, notices);
    c.DeleteLocked(right_key, notices);
    c.PutLocked(config_key, EncodeConfig(read.shards - 1, read.replicas, read.policy), 0, notices);
    return c.revision_;
  });
}

absl::StatusOr<int64_t> MemoryClusterMap::SetPolicy(const PlacementPolicy& policy,
                                                    const ClusterView& read) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::StatusOr<int64_t> {
    const std::string key = ConfigKey(cluster_);
    auto it = c.keys_.find(key);
    if (it == c.keys_.end() || it->second.mod_revision != read.config_revision) {
      return absl::FailedPreconditionError(absl::StrCat("the config changed since revision ",
                                                        read.config_revision, "; re-read the map"));
    }
    ++c.revision_;
    c.PutLocked(key, EncodeConfig(read.shards, read.replicas, policy), 0, notices);
    return c.revision_;
  });
}

absl::Status MemoryClusterMap::PublishLoad(const ShardLoad& load, LeaseId lease) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::Status {
    if (c.leases_.count(lease) == 0) {
      return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
    }
    ++c.revision_;
    c.PutLocked(LoadKey(cluster_, load.shard), EncodeLoad(load), lease, notices);
    return absl::OkStatus();
  });
}

absl::StatusOr<bool> MemoryClusterMap::Campaign(const std::string& node, LeaseId lease) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::StatusOr<bool> {
    const std::string key = PlacerKey(cluster_);
    auto it = c.keys_.find(key);
    if (it != c.keys_.end()) {
      absl::StatusOr<std::string> holder = DecodePlacer(key, it->second.value);
      if (!holder.ok()) return holder.status();
      return *holder == node;
    }
    if (c.leases_.count(lease) == 0) {
      return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
    }
    ++c.revision_;
    c.PutLocked(key, EncodePlacer(node), lease, notices);
    return true;
  });
}

absl::StatusOr<LeaseId> MemoryClusterMap::GrantLease(absl::Duration ttl) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  if (ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("a lease's TTL must be at least 1 s");
  }
  ttl = absl::Seconds(std::ceil(absl::ToDoubleSeconds(ttl)));  // whole seconds, as etcd
  MemoryCoordinator& c = *coordinator_;
  MutexLock l(&c.mu_);
  const LeaseId id = c.next_lease_++;
  c.leases_[id] = MemoryCoordinator::Lease{ttl, c.clock_->Now() + ttl, {}};
  return id;
}

absl::StatusOr<absl::Duration> MemoryClusterMap::KeepAlive(LeaseId lease) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices*) -> absl::StatusOr<absl::Duration> {
    auto it = c.leases_.find(lease);
    if (it == c.leases_.end()) {
      return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
    }
    it->second.deadline = c.clock_->Now() + it->second.ttl;
    return it->second.ttl;
  });
}

absl::Status MemoryClusterMap::RevokeLease(LeaseId lease) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::Status {
    auto it = c.leases_.find(lease);
    if (it == c.leases_.end()) {
      return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
    }
    if (!it->second.keys.empty()) ++c.revision_;
    const std::set<std::string> keys = it->second.keys;
    for (const std::string& key : keys) c.DeleteLocked(key, notices);
    c.leases_.erase(lease);
    return absl::OkStatus();
  });
}

absl::Status MemoryClusterMap::RegisterNode(const NodeInfo& node, LeaseId lease) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  return Transact([&](MemoryCoordinator::Notices* notices) -> absl::Status {
    const std::string key = NodeKey(cluster_, node.name);
    if (c.leases_.count(lease) == 0) {
      return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
    }
    if (c.keys_.count(key) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("node \"", node.name, "\" is already registered in cluster \"", cluster_,
                       "\" (another kvserver uses that --node name, or a previous run of this node "
                       "whose lease has not expired yet: wait --lease_ttl_s)"));
    }
    ++c.revision_;
    c.PutLocked(key, EncodeNode(node), lease, notices);
    return absl::OkStatus();
  });
}

namespace {
class MemoryWatch : public MapWatch {
 public:
  explicit MemoryWatch(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  ~MemoryWatch() override { cancel_(); }

 private:
  std::function<void()> cancel_;
};
}  // namespace

absl::StatusOr<std::unique_ptr<MapWatch>> MemoryClusterMap::Watch(
    std::function<void(int64_t revision)> on_change) {
  if (absl::Status s = CheckReachable(); !s.ok()) return s;
  MemoryCoordinator& c = *coordinator_;
  auto w = std::make_shared<MemoryCoordinator::Watcher>();
  w->prefix = ClusterPrefix(cluster_);
  w->on_change = std::move(on_change);
  {
    MutexLock l(&c.mu_);
    c.watchers_.push_back(w);
  }
  return std::unique_ptr<MapWatch>(new MemoryWatch([&c, w] {
    {
      MutexLock l(&c.mu_);
      c.watchers_.erase(std::remove(c.watchers_.begin(), c.watchers_.end(), w), c.watchers_.end());
    }
    MutexLock l(&w->call_mu);  // waits for a callback in progress
    w->active = false;
  }));
}

}  // namespace unloadkv::cluster
