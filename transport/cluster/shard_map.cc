#include "transport/cluster/shard_map.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::cluster {

std::vector<std::string> ShardInfo::Replicas() const {
  std::vector<std::string> all;
  if (!primary.empty()) all.push_back(primary);
  all.insert(all.end(), backups.begin(), backups.end());
  return all;
}

bool ShardInfo::HasReplica(absl::string_view node) const {
  return primary == node || std::find(backups.begin(), backups.end(), node) != backups.end();
}

absl::string_view ShardStateName(ShardState state) {
  switch (state) {
    case ShardState::kServing:
      return "serving";
    case ShardState::kUnderReplicated:
      return "under-replicated";
    case ShardState::kPrimaryDown:
      return "primary-down";
    case ShardState::kNoPrimary:
      return "no-primary";
  }
  return "unknown";
}

const ShardInfo* ClusterView::ShardFor(absl::string_view key) const {
  // shard_list is ordered by start: the last shard starting at or before `key`.
  auto it = std::upper_bound(shard_list.begin(), shard_list.end(), key,
                             [](absl::string_view k, const ShardInfo& s) { return k < s.start; });
  if (it == shard_list.begin()) return nullptr;
  --it;
  return it->Contains(key) ? &*it : nullptr;
}

const ShardInfo* ClusterView::ShardById(uint32_t id) const {
  for (const ShardInfo& s : shard_list) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

ShardState ClusterView::StateOf(const ShardInfo& shard) const {
  if (shard.primary.empty()) return ShardState::kNoPrimary;
  if (!IsLive(shard.primary)) return ShardState::kPrimaryDown;
  int live = 1;
  for (const std::string& b : shard.backups) live += IsLive(b) ? 1 : 0;
  return live >= replicas ? ShardState::kServing : ShardState::kUnderReplicated;
}

absl::StatusOr<std::vector<ShardInfo>> InitialShards(int n,
                                                     const std::vector<std::string>& split_keys) {
  if (n < 1 || n > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shards must be between 1 and ", kMaxShards, "; got ", n));
  }
  std::vector<std::string> bounds;
  if (!split_keys.empty()) {
    if (static_cast<int>(split_keys.size()) != n - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(n, " shards need ", n - 1, " split keys; got ", split_keys.size()));
    }
    for (size_t i = 0; i < split_keys.size(); ++i) {
      if (split_keys[i].empty() || (i > 0 && split_keys[i] <= split_keys[i - 1])) {
        return absl::InvalidArgumentError("split keys must be non-empty and strictly increasing");
      }
    }
    bounds = split_keys;
  } else {
    if (n > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than 256 shards need explicit split keys; got ", n));
    }
    for (int i = 1; i < n; ++i) bounds.push_back(std::string(1, static_cast<char>(i * 256 / n)));
  }
  std::vector<ShardInfo> shards(n);
  for (int i = 0; i < n; ++i) {
    shards[i].id = static_cast<uint32_t>(i);
    shards[i].start = i == 0 ? "" : bounds[i - 1];
    shards[i].end = i == n - 1 ? "" : bounds[i];
  }
  return shards;
}

absl::Status CheckCoverage(const std::vector<ShardInfo>& shards) {
  if (shards.empty()) return absl::FailedPreconditionError("the cluster map has no shards");
  if (!shards.front().start.empty()) {
    return absl::DataLossError("the cluster map does not start at the smallest key");
  }
  for (size_t i = 0; i + 1 < shards.size(); ++i) {
    if (shards[i].end.empty() || shards[i].end != shards[i + 1].start) {
      return absl::DataLossError(
          absl::StrCat("the cluster map has a gap or overlap after shard ", shards[i].id));
    }
  }
  if (!shards.back().end.empty()) {
    return absl::DataLossError("the cluster map does not reach the largest key");
  }
  return absl::OkStatus();
}

namespace {
absl::Status CheckName(absl::string_view what, absl::string_view name) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be 1 to 64 characters; got \"", absl::CHexEscape(name), "\""));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " may hold only letters, digits, '.', '_' and '-'; got \"",
                       absl::CHexEscape(name), "\""));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status CheckNodeName(absl::string_view name) { return CheckName("--node", name); }
absl::Status CheckClusterName(absl::string_view name) { return CheckName("--cluster", name); }

}  // namespace unloadkv::cluster
