// ShardReplica: the arena, the role and its changes, the key range, the fences.
#include "server/shard_replica.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace unloadkv::server {
absl::StatusOr<std::shared_ptr<ShardReplica>> ShardReplica::Create(
    engine::Engine* engine, uint32_t id, uint64_t arena_bytes, bool huge_pages, Reaper* reaper,
    std::function<void(uint64_t)> close_peer, void* address_hint,
    uint64_t max_grant_bytes_per_client, Protection protection) {
  std::shared_ptr<ShardReplica> r(new ShardReplica());
  r->id_ = id;
  r->protection_ = std::move(protection);
  r->device_ = engine->device();
  r->engine_ = engine;
  r->reaper_ = reaper;
  r->close_peer_ = std::move(close_peer);
  r->arena_bytes_ = arena_bytes;
  r->memory_ = std::make_unique<MappedMemory>(arena_bytes, huge_pages, address_hint);
  if (r->memory_->data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("arena: cannot map ", arena_bytes, " bytes; lower --arena_bytes"));
  }
  // Least privilege: nothing reads an arena remotely; with windows nothing writes it through
  // the arena's own key either.
  uint32_t access =
      rnic::kLocalWrite | (r->protection_.windows ? rnic::kMwBind : rnic::kRemoteWrite);
  if (r->memory_->huge()) access |= rnic::kHugePageBacked;
  auto mr = engine->RegisterMemory(r->memory_->data(), r->memory_->size(), access);
  if (!mr.ok()) return mr.status();
  r->mr_ = std::move(*mr);
  // Every replica of a shard manages exactly arena_bytes, whatever its mapping rounded to,
  // so that slots mirror.
  r->store_ =
      std::make_unique<KvStore>(r->memory_->data(), arena_bytes, max_grant_bytes_per_client);
  return r;
}

ShardReplica::~ShardReplica() {
  std::map<std::string, LinkState> links;
  Callbacks out;
  bool was_primary;
  uint64_t mirror_peer;
  {
    MutexLock l(&mu_);
    links.swap(links_);
    FailPendingLocked("replica closed", &out);
    was_primary = role_ == Role::kPrimary;
    mirror_peer = mirror_peer_;
  }
  out.Run();
  Retire(&links);  // their callbacks find the replica gone
  // Its arena goes away: no window onto it may outlive this (the primary's connection would
  // keep the mirror window's key in its engine table).
  if (mirror_peer != 0 && close_peer_) close_peer_(mirror_peer);
  Demoted(was_primary);
}

void ShardReplica::Demoted(bool was_primary) {
  if (was_primary && protection_.on_demoted) protection_.on_demoted(id_);
}

void ShardReplica::Retire(std::map<std::string, LinkState>* links) {
  if (reaper_ != nullptr) {
    for (auto& [node, ls] : *links) reaper_->Release(std::move(ls.link));
  }
  links->clear();
}

ShardReplica::Role ShardReplica::role() const {
  MutexLock l(&mu_);
  return role_;
}

uint64_t ShardReplica::epoch() const {
  MutexLock l(&mu_);
  return epoch_;
}

uint64_t ShardReplica::fence() const {
  MutexLock l(&mu_);
  return fence_;
}

size_t ShardReplica::pending() const {
  MutexLock l(&mu_);
  return pending_.size();
}

void ShardReplica::SetRange(const std::string& start, const std::string& end) {
  MutexLock l(&mu_);
  start_ = start;
  end_ = end;
}

bool ShardReplica::ServesKey(absl::string_view key) const {
  MutexLock l(&mu_);
  return role_ == Role::kPrimary && key >= start_ && (end_.empty() || key < end_);
}

bool ShardReplica::ContainsRange(absl::string_view start, absl::string_view end) const {
  MutexLock l(&mu_);
  if (start < start_) return false;
  if (end_.empty()) return true;
  return !end.empty() && end <= end_;
}

void ShardReplica::BecomePrimary(uint64_t epoch) {
  uint64_t old_peer;
  {
    MutexLock l(&mu_);
    role_ = Role::kPrimary;
    epoch_ = epoch;
    fence_ = std::max(fence_, epoch);
    handing_over_.clear();  // a hand-over this replica made as an earlier primary is over
    split_open_ = false;    // so is a split
    // Seqs go on from the state it holds (a backup's last applied record, or its log's): a
    // record's seq names it in every replica's log across primaries.
    recovered_ = false;
    old_peer = std::exchange(primary_peer_, 0);
    Retire(&links_);
  }
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
}

void ShardReplica::AdvanceEpoch(uint64_t epoch) {
  MutexLock l(&mu_);
  epoch_ = std::max(epoch_, epoch);
  fence_ = std::max(fence_, epoch);
}

void ShardReplica::StepDown(const std::string& why) {
  Callbacks out;
  std::map<std::string, LinkState> closed;
  uint64_t old_peer;
  bool was_primary;
  {
    MutexLock l(&mu_);
    was_primary = role_ == Role::kPrimary;
    if (role_ == Role::kPrimary) role_ = Role::kDeposed;
    FailPendingLocked(why, &out);
    closed.swap(links_);
    old_peer = std::exchange(primary_peer_, 0);
  }
  Retire(&closed);
  // The attached primary's connection serves this replica only. Its primary may never close
  // it: a link that failed on a cut network sends nothing more, so this end would hold it
  // forever (found by cluster_sim, seed 5 of the partition sweep).
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
  out.Run();
  Demoted(was_primary);
}

void ShardReplica::Tick() {
  std::vector<std::shared_ptr<ReplicaLink>> links;
  {
    MutexLock l(&mu_);
    for (auto& [node, ls] : links_) {
      PushSnapshotLocked(&ls);  // a paced transfer's budget grew meanwhile
      links.push_back(ls.link);
    }
  }
  for (auto& link : links) {
    link->CheckDeadlines();
    link->Flush();  // what waited behind a full window or an injected cut
  }
}

void ShardReplica::RaiseFence(uint64_t epoch) {
  uint64_t old_peer = 0;
  {
    MutexLock l(&mu_);
    if (epoch > fence_) old_peer = std::exchange(primary_peer_, 0);
    fence_ = std::max(fence_, epoch);
  }
  if (old_peer != 0 && close_peer_) close_peer_(old_peer);
}

}  // namespace unloadkv::server
