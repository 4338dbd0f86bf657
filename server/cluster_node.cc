#include "server/cluster_node.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "transport/base/buggify.h"
#include "transport/base/logging.h"

namespace unloadkv::server {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void Erase(std::vector<std::string>* v, const std::string& x) {
  v->erase(std::remove(v->begin(), v->end(), x), v->end());
}

// How long a backup waits, per live backup listed before it, before it tries to take over
// itself (the first live backup tries at once; the map transaction admits one winner).
constexpr absl::Duration kTakeOverStagger = absl::Seconds(1);
// A joiner's attach that failed is tried again after 50 ms, doubling up to 1 s: the first
// failure is often only the joiner's map a revision behind the primary's (it refuses a shard
// its map does not place on it yet, and reads the map at least every 100 ms).
constexpr absl::Duration kFirstLinkRetry = absl::Milliseconds(50);
constexpr absl::Duration kMaxLinkRetry = absl::Seconds(1);
// Keys a primary deletes a round that are outside its range (after a split).
constexpr size_t kPurgeBatch = 2048;

}  // namespace

ClusterNode::ClusterNode(cluster::ClusterMap* map, const Options& options, ShardTable* shards,
                         engine::Engine* engine, const Clock* clock)
    : map_(map),
      options_(options),
      shards_(shards),
      engine_(engine),
      clock_(clock),
      placer_(
          std::make_unique<Placer>(map,
                                   Placer::Options{options.self.name, options.placement_interval,
                                                   options.placement_timeout, options.metrics},
                                   clock)) {}

ClusterNode::~ClusterNode() { Stop(); }

bool ClusterNode::LeaseValid() const {
  // After a lost lease, only once the map confirmed what this node still holds.
  return confirmed_.load() == losses_.load() &&
         absl::ToUnixNanos(clock_->Now()) < valid_until_ns_.load();
}

absl::Status ClusterNode::Register() {
  const absl::Time sent = clock_->Now();
  absl::StatusOr<cluster::LeaseId> lease = map_->GrantLease(options_.lease_ttl);
  if (!lease.ok()) return lease.status();
  if (absl::Status st = map_->RegisterNode(options_.self, *lease); !st.ok()) {
    (void)map_->RevokeLease(*lease);
    return st;
  }
  lease_.store(*lease);
  // The drift margin: a fifth of the TTL (docs/cluster.md, "Timing assumption").
  valid_until_ns_.store(absl::ToUnixNanos(sent + options_.lease_ttl * 4 / 5));
  return absl::OkStatus();
}

absl::Status ClusterNode::Start() {
  started_ = clock_->Now();
  if (absl::StatusOr<cluster::ClusterView> v = map_->Read(); !v.ok()) return v.status();
  absl::Status registered = Register();
  if (options_.run_threads && registered.code() == absl::StatusCode::kAlreadyExists) {
    // A restarted node (a crash, `systemctl restart`) finds its previous incarnation's key
    // until that lease expires, within a TTL; a live process of the same name keeps it, and
    // this one gives up after that.
    Log(LogLevel::kInfo, absl::StrCat("cluster: ", registered.message(),
                                      "; waiting up to the lease TTL for it to expire"));
    const absl::Time give_up = clock_->Now() + options_.lease_ttl + absl::Seconds(2);
    while (registered.code() == absl::StatusCode::kAlreadyExists && clock_->Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(100));  // bounded by give_up; startup only
      registered = Register();
    }
  }
  if (!registered.ok()) return registered;
  absl::StatusOr<std::unique_ptr<cluster::MapWatch>> w = map_->Watch([this](int64_t) { Signal(); });
  if (!w.ok()) {
    (void)map_->RevokeLease(lease_.load());
    return w.status();
  }
  watch_ = std::move(*w);
  if (options_.run_threads) {
    lease_thread_ = std::thread([this] { KeepLease(); });
    control_thread_ = std::thread([this] { Control(); });
  }
  return absl::OkStatus();
}

void ClusterNode::Stop() {
  if (stop_.exchange(true)) return;
  Signal();
  if (lease_thread_.joinable()) lease_thread_.join();
  if (control_thread_.joinable()) control_thread_.join();
  watch_.reset();
  valid_until_ns_.store(0);
  // Revoking deletes the node's key now: its backups take over without waiting for the TTL.
  if (lease_.load() != 0) (void)map_->RevokeLease(lease_.load());
}

void ClusterNode::NoteMapError() {
  if (options_.metrics != nullptr) options_.metrics->AddMapErrors(1);
}

void ClusterNode::Signal() { wake_->Signal(); }

void ClusterNode::KeepLease() {
  const absl::Duration period = options_.lease_ttl / 3;
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> l(wake_->mu);
      wake_->cv.wait_for(l, absl::ToChronoMilliseconds(period), [this] { return stop_.load(); });
    }
    if (stop_.load()) return;
    LeaseTick();
  }
}

void ClusterNode::LeaseTick() {
  if (lease_lost_.load()) {
    if (absl::Status st = Register(); st.ok()) {
      Log(LogLevel::kInfo, absl::StrCat("cluster: node ", name(), " registered again"));
      lease_lost_.store(false);
      Signal();
    } else {
      Log(LogLevel::kWarning, absl::StrCat("cluster: registering again: ", st.ToString()));
    }
    return;
  }
  const absl::Time sent = clock_->Now();
  absl::StatusOr<absl::Duration> ttl = map_->KeepAlive(lease_.load());
  if (ttl.ok()) {
    valid_until_ns_.store(absl::ToUnixNanos(sent + options_.lease_ttl * 4 / 5));
  } else if (ttl.status().code() == absl::StatusCode::kNotFound) {
    // Expired: to the cluster this node is gone, and backups may have taken over. Its replicas
    // stay, unused for local reads, until it has registered again and reconciled with the
    // map: a replica is kept only where the map still names this node its primary or a
    // backup, and then nobody took over or changed the group without it. Dropping them here lost
    // the shard when every replica's lease lapsed at once (etcd or the nodes starved for longer
    // than the TTL): the first node back found no replica left and served the shard empty.
    valid_until_ns_.store(0);
    lease_lost_.store(true);
    losses_.fetch_add(1);
    Log(LogLevel::kWarning,
        absl::StrCat("cluster: node ", name(),
                     " lost its lease (paused or cut off for longer than ",
                     absl::FormatDuration(options_.lease_ttl),
                     "); registering again, then the map says which replicas are still current"));
    Signal();
  } else {
    // etcd unreachable: keep trying; reads fall back to barriers once validity lapses.
    NoteMapError();
  }
}

void ClusterNode::Control() {
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> l(wake_->mu);
      wake_->cv.wait_for(l, absl::ToChronoMilliseconds(options_.tick),
                         [this] { return wake_->changed || stop_.load(); });
      wake_->changed = false;
    }
    if (stop_.load()) return;
    ControlTick();
  }
}

void ClusterNode::ControlTick() {
  // Fault point: a round that does not happen (a slow or starved control thread).
  if (UNLOADKV_BUGGIFY("cluster: a control round is skipped")) return;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) r->Tick();
  // A view read after the node registered again (lease_lost_ cleared after losses_ counted
  // the loss) confirms its replicas once reconciled.
  const uint64_t losses = losses_.load();
  const bool lost = lease_lost_.load();
  absl::StatusOr<cluster::ClusterView> view = map_->Read();
  if (!view.ok()) {
    NoteMapError();
    return;  // keep serving with what this node has
  }
  if (lost || lease_lost_.load() || losses_.load() != losses) return;
  // The map no longer lists this node: its lease expired while it could not tell (cut off
  // from the map service). Acting on the map now would have the others undo it at once (a
  // join by a node they see as gone), over and over; the lease tick finds out and registers
  // again first.
  if (!view->IsLive(name())) return;
  Reconcile(*view);
  confirmed_.store(losses);
  PublishLoads(*view);
  placer_->Tick(*view, lease_.load());
}

bool ClusterNode::TakeChanged() {
  std::lock_guard<std::mutex> l(wake_->mu);
  return std::exchange(wake_->changed, false);
}

bool ClusterNode::Update(const cluster::ShardInfo& next, const std::vector<std::string>& absent,
                         const std::string& what) {
  absl::StatusOr<int64_t> rev = map_->UpdateShard(next, absent);
  if (!rev.ok()) {
    if (rev.status().code() != absl::StatusCode::kFailedPrecondition) {
      NoteMapError();
    }
    Log(LogLevel::kInfo, absl::StrCat("cluster: shard ", next.id, ": ", what,
                                      " not applied: ", rev.status().message()));
    Signal();
    return false;
  }
  Log(LogLevel::kInfo, absl::StrCat("cluster: shard ", next.id, ": ", what, " (epoch ", next.epoch,
                                    ", primary ", next.primary.empty() ? "-" : next.primary,
                                    ", backups [", absl::StrJoin(next.backups, ","), "], joining [",
                                    absl::StrJoin(next.joining, ","), "])"));
  {
    // The view requests are checked against includes what this node just wrote: a primary
    // acting on it (attaching a joiner) is not refused by a view from before the write, which
    // cost the joiner a link retry (1 s) before the next read of the map.
    MutexLock l(&view_mu_);
    if (last_view_->revision < *rev) {
      auto view = std::make_shared<cluster::ClusterView>(*last_view_);
      for (cluster::ShardInfo& s : view->shard_list) {
        if (s.id != next.id) continue;
        s = next;
        s.mod_revision = *rev;
      }
      view->revision = *rev;
      last_view_ = std::move(view);
    }
  }
  Signal();
  return true;
}

cluster::ClusterView ClusterNode::LastView() const {
  MutexLock l(&view_mu_);
  return *last_view_;
}

absl::Status ClusterNode::AuthorizeNodeRequest(const std::string& sender, uint32_t shard,
                                               uint64_t epoch, bool attach, std::string* reason) {
  std::shared_ptr<const cluster::ClusterView> view;
  {
    MutexLock l(&view_mu_);
    view = last_view_;
  }
  const cluster::ShardInfo* s = view->ShardById(shard);
  absl::Status denied;
  if (s == nullptr) {
    *reason = "not_placed";
    denied = absl::PermissionDeniedError(absl::StrCat(
        "shard ", shard, " is not in the cluster map (revision ", view->revision, ")"));
  } else if (s->primary != sender || (attach && s->epoch != epoch)) {
    *reason = "not_primary";
    denied = absl::PermissionDeniedError(
        absl::StrCat("node \"", sender, "\" is not shard ", shard, "'s primary",
                     attach ? absl::StrCat(" at epoch ", epoch) : "", ": the map (revision ",
                     view->revision, ") names \"", s->primary, "\" at epoch ", s->epoch));
  } else if (attach && !Contains(s->joining, name()) && !Contains(s->backups, name())) {
    *reason = "not_placed";
    denied = absl::PermissionDeniedError(absl::StrCat("the map (revision ", view->revision,
                                                      ") does not place shard ", shard, " on node ",
                                                      name()));
  } else {
    return absl::OkStatus();
  }
  Signal();  // this node's map may be behind the sender's: read it again now
  return denied;
}

void ClusterNode::Reconcile(const cluster::ClusterView& view) {
  {
    MutexLock l(&view_mu_);
    last_view_ = std::make_shared<const cluster::ClusterView>(view);
  }
  RemoveOrphans(view);
  const std::string& me = name();
  for (const cluster::ShardInfo& s : view.shard_list) {
    std::shared_ptr<ShardReplica> local = shards_->Get(s.id);
    if (s.primary == me) {
      if (local != nullptr && local->role() == ShardReplica::Role::kPrimary) {
        local->AdvanceEpoch(s.epoch);
        ServePrimary(view, s, local);
        continue;
      }
      if (local != nullptr && local->recovered()) {
        MaybeTakeBack(view, s, local);
        continue;
      }
      if (local != nullptr && local->role() == ShardReplica::Role::kBackup &&
          local->fence() == s.epoch) {
        // This node's own take-over, applied although its write got no answer (the map service
        // paused past the deadline answers the queued request when it resumes). Only this
        // node names itself primary, and only in TakeOver, which raised this fence first: the
        // replica has applied nothing since, so it serves now, as TakeOver would have.
        Log(LogLevel::kWarning,
            absl::StrCat("cluster: shard ", s.id, ": the take-over at epoch ", s.epoch,
                         " whose answer was lost was applied; serving as primary"));
        local->SetRange(s.start, s.end);
        local->BecomePrimary(s.epoch);
        continue;
      }
      // Named primary without a serving replica here (a restarted incarnation, or deposed):
      // resign, so that a backup takes over.
      cluster::ShardInfo next = s;
      next.primary.clear();
      next.epoch = s.epoch + 1;
      Update(next, {}, "resign as primary (no serving replica on this node)");
      if (local != nullptr) shards_->Remove(s.id, "resigned");
    } else if (Contains(s.backups, me)) {
      if (local == nullptr || local->role() != ShardReplica::Role::kBackup) {
        cluster::ShardInfo next = s;
        Erase(&next.backups, me);
        next.epoch = s.epoch + 1;
        Update(next, {}, "resign as backup (no replica on this node)");
        if (local != nullptr) shards_->Remove(s.id, "resigned");
        continue;
      }
      MaybeTakeOver(view, s, local);
    } else if (Contains(s.joining, me)) {
      // The primary attaches this node and transfers the shard; nothing to do here.
    } else {
      // A replica this node recovered from its log stays while the node joins: the primary's
      // attach finds it and brings it up to date by delta, without a second replay of the log.
      const bool keep = local != nullptr && local->recovered() && CanJoin(view, s);
      if (local != nullptr && !keep) shards_->Remove(s.id, "not in the shard's replica group");
      MaybeJoin(view, s);
    }
  }
}

bool ClusterNode::NewerLogElsewhere(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                                    std::pair<uint64_t, uint64_t> mine, std::string* who) const {
  for (const std::string& b : s.backups) {
    if (b == name() || !view.IsLive(b)) continue;
    const std::map<uint32_t, std::pair<uint64_t, uint64_t>>& logs = view.nodes.at(b).logs;
    auto it = logs.find(s.id);
    if (it != logs.end() && it->second > mine) {
      *who = b;
      return true;
    }
  }
  return false;
}

void ClusterNode::MaybeTakeBack(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                                const std::shared_ptr<ShardReplica>& local) {
  // The map still names this node primary: nobody took over, and under fsync=always its log
  // holds every acknowledged write. A backup's recovered log may still be newer (records the
  // primary had not synced under interval or never, or a primary's log cut shorter): epoch and
  // seq decide, never the clock.
  const std::pair<uint64_t, uint64_t> mine = local->recovered_position();
  std::string newer;
  if (NewerLogElsewhere(view, s, mine, &newer)) {
    cluster::ShardInfo next = s;
    next.primary.clear();
    next.epoch = s.epoch + 1;
    Update(next, {},
           absl::StrCat("resign as primary: backup ", newer,
                        "'s recovered log is newer than this node's (epoch ", mine.first, ", seq ",
                        mine.second, ")"));
    return;
  }
  bool waiting = false;
  for (const std::string& b : s.backups) waiting = waiting || (b != name() && !view.IsLive(b));
  if (waiting && clock_->Now() - started_ < 2 * options_.lease_ttl) return;  // they may be back
  TakeOver(view, s, local, {},
           absl::StrCat("take back with the state recovered from its log (epoch ", mine.first,
                        ", seq ", mine.second, ")"));
}

void ClusterNode::MaybeTakeOver(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                                const std::shared_ptr<ShardReplica>& local) {
  const std::string& me = name();
  const bool gone = s.primary.empty() || !view.IsLive(s.primary);
  if (!gone) {
    primary_gone_since_.erase(s.id);
    return;
  }
  // A backup that restarted with its log yields to a named backup whose recovered log is newer.
  std::string newer;
  if (local->recovered() && NewerLogElsewhere(view, s, local->recovered_position(), &newer)) {
    return;
  }
  const absl::Time now = clock_->Now();
  const absl::Time since = primary_gone_since_.emplace(s.id, now).first->second;
  int rank = 0;
  for (const std::string& b : s.backups) {
    if (b == me) break;
    if (view.IsLive(b)) ++rank;
  }
  if (now - since < rank * kTakeOverStagger) return;
  std::vector<std::string> absent;
  if (!s.primary.empty()) absent.push_back(s.primary);
  if (TakeOver(view, s, local, absent,
               absl::StrCat("take over from ", s.primary.empty() ? "(resigned)" : s.primary))) {
    counters_.failovers.fetch_add(1);
    if (options_.metrics != nullptr) options_.metrics->AddFailovers(1);
    primary_gone_since_.erase(s.id);
  }
}

bool ClusterNode::TakeOver(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                           const std::shared_ptr<ShardReplica>& local,
                           const std::vector<std::string>& absent, const std::string& what) {
  const std::string& me = name();
  cluster::ShardInfo next = s;
  next.epoch = s.epoch + 1;
  next.primary = me;
  next.durable = options_.durable;
  next.handover_to.clear();  // a hand-over asked of the previous primary ends with it
  next.split_at.clear();     // and so does a split (its copies are left to RemoveOrphans)
  next.split_id = 0;
  next.merge_with = 0;  // and a merge (what it copied is purged: outside the range)
  next.backups.clear();
  next.joining.clear();
  // Every other live replica rejoins by state transfer from the new primary.
  for (const std::string& n : s.backups) {
    if (n != me && view.IsLive(n)) next.joining.push_back(n);
  }
  for (const std::string& n : s.joining) {
    if (n != me && view.IsLive(n) && !Contains(next.joining, n)) next.joining.push_back(n);
  }
  // The fence first: from here on this replica refuses the old epoch, so the old primary can
  // get no write acknowledged that this replica lacks.
  local->RaiseFence(next.epoch);
  // Nothing it applied may be served before its own log holds it (a log's group commit).
  if (!local->WaitLogged(absl::Seconds(2))) {
    Log(LogLevel::kWarning, absl::StrCat("cluster: shard ", s.id,
                                         ": not taking over yet: its log "
                                         "has not acknowledged every record it applied"));
    return false;
  }
  if (!Update(next, absent, what)) return false;
  local->SetRange(s.start, s.end);
  local->BecomePrimary(next.epoch);
  return true;
}

bool ClusterNode::CanJoin(const cluster::ClusterView& view, const cluster::ShardInfo& s) {
  const size_t members = 1 + s.backups.size() + s.joining.size();
  return !s.primary.empty() && view.IsLive(s.primary) &&
         members < static_cast<size_t>(view.replicas);
}

void ClusterNode::MaybeJoin(const cluster::ClusterView& view, const cluster::ShardInfo& s) {
  const std::string& me = name();
  if (s.primary.empty() && s.backups.empty()) {
    if (s.epoch > 0 && s.durable) {
      // Its data is on the disks of nodes that are gone: wait for one of them.
      const absl::Time now = clock_->Now();
      auto said = waiting_said_.find(s.id);
      if (said == waiting_said_.end() || now - said->second >= absl::Seconds(30)) {
        waiting_said_[s.id] = now;
        Log(LogLevel::kWarning,
            absl::StrCat("cluster: shard ", s.id, " (epoch ", s.epoch,
                         ") has no replica left; it keeps its data on disk, so it waits for a "
                         "node that held it to come back with its data dir (or for `kvclient "
                         "cluster force-empty --shard=",
                         s.id, "`, which gives its data up)"));
      }
      return;
    }
    // Nobody holds the shard: claim it.
    if (s.epoch > 0) {
      Log(LogLevel::kWarning,
          absl::StrCat("cluster: shard ", s.id, " has no surviving replica (epoch ", s.epoch,
                       "): its data is lost; serving it empty"));
    }
    absl::StatusOr<std::shared_ptr<ShardReplica>> local = shards_->GetOrCreate(s.id);
    if (!local.ok()) {
      Log(LogLevel::kError, absl::StrCat("cluster: shard ", s.id, ": ", local.status().message()));
      return;
    }
    (*local)->ClearForClaim();
    cluster::ShardInfo next = s;
    next.epoch = s.epoch + 1;
    next.primary = me;
    next.durable = options_.durable;
    Erase(&next.joining, me);
    (*local)->RaiseFence(next.epoch);
    if (Update(next, {}, "claim")) {
      (*local)->SetRange(s.start, s.end);
      (*local)->BecomePrimary(next.epoch);
    } else {
      shards_->Remove(s.id, "claim lost");
    }
    return;
  }
  if (!CanJoin(view, s)) return;  // a backup takes over first, or the group is whole
  cluster::ShardInfo next = s;
  next.joining.push_back(me);
  Update(next, {}, "join");
}

std::string ClusterNode::HandOverObstacle(const cluster::ClusterView& view,
                                          const cluster::ShardInfo& s, ShardReplica& local) {
  const std::string& to = s.handover_to;
  if (!Contains(s.backups, to) || !view.IsLive(to)) return "not a live backup";
  // A backup gone or out of step holds the writes in flight up, and only the repair this
  // hand-over would hold off (ServePrimary) lets them go: give it up first (found by
  // cluster_sim --placement, seed 11: a backup cut off mid-drain stalled the shard for good).
  std::string failing;
  for (const std::string& b : s.backups) {
    if (!view.IsLive(b)) failing = b;
  }
  for (const std::string& b : local.FailedLinks()) failing = b;
  if (failing.empty()) return "";
  return absl::StrCat("backup ", failing, " failed; the group is repaired first");
}

bool ClusterNode::HandOver(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                           const std::shared_ptr<ShardReplica>& local) {
  const std::string& to = s.handover_to;
  if (to.empty()) {
    local->SetHandingOver("");
    return false;
  }
  if (const std::string why = HandOverObstacle(view, s, *local); !why.empty()) {
    // Not possible now: serve on, and say so in the map (whoever asked may ask again).
    local->SetHandingOver("");
    cluster::ShardInfo next = s;
    next.handover_to.clear();
    Update(next, {}, absl::StrCat("give up handing the primary's role over to ", to, ": ", why));
    return true;
  }
  local->SetProgressHook([wake = wake_] { wake->Signal(); });  // when it drained
  local->SetHandingOver(to);  // new writes refused ABORTED from here on: the SDK retries them
  if (!local->Drained()) return true;  // the writes in flight commit first (a later round)
  cluster::ShardInfo next = s;
  next.epoch = s.epoch + 1;
  next.primary.clear();
  next.handover_to.clear();
  Erase(&next.backups, to);
  next.backups.insert(next.backups.begin(), to);  // first in line: it takes over at once
  // A move (the group holds one replica more than wanted: `to` joined for it): this node
  // leaves, its replica going at the next round (nothing is in flight). A swap with a backup:
  // it stays, joining the new primary (which attaches it as it does every other replica).
  const size_t members = 1 + s.backups.size() + s.joining.size();
  const bool stay = members <= static_cast<size_t>(view.replicas);
  if (stay) next.joining.push_back(name());
  Update(
      next, {},
      absl::StrCat("hand the primary's role over to ", to, stay ? " and rejoin it" : " and leave"));
  return true;
}

void ClusterNode::ServePrimary(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                               const std::shared_ptr<ShardReplica>& local) {
  local->SetRange(s.start, s.end);
  if (HandOver(view, s, local)) return;
  if (LinkSplitBackups(view, s, local)) return;
  const std::vector<std::string> failed = local->FailedLinks();
  const std::vector<std::string> linked = local->LinkNodes();
  cluster::ShardInfo next = s;
  std::vector<std::string> absent;
  bool membership = false, changed = false;
  for (const std::string& b : s.backups) {
    if (!view.IsLive(b)) {
      Erase(&next.backups, b);
      absent.push_back(b);
      membership = true;
    } else if (Contains(failed, b) || !Contains(linked, b)) {
      // Out of step: it rejoins by a fresh state transfer.
      Erase(&next.backups, b);
      next.joining.push_back(b);
      membership = true;
    }
  }
  for (const std::string& j : s.joining) {
    const bool attached_as_joiner = join_links_.count({s.id, j}) > 0;
    if (!view.IsLive(j)) {
      Erase(&next.joining, j);
      join_links_.erase({s.id, j});
      changed = true;
    } else if (Contains(failed, j)) {
      local->RemoveLink(j);  // a joining node does not count for durability: drop at once
    } else if (Contains(linked, j) && !attached_as_joiner) {
      // A link from before it joined: it was a backup, left and joined again between two of
      // this node's reads of the map, and holds no replica now. It is attached afresh (found
      // by cluster_sim --placement, seed 13: promoted on the old link, it resigned at once,
      // and the two took turns forever).
      local->RemoveLink(j);
    } else if (Contains(linked, j) && local->CaughtUp(j)) {
      Erase(&next.joining, j);
      next.backups.push_back(j);
      join_links_.erase({s.id, j});
      membership = true;
    }
  }
  if (membership || changed) {
    if (membership) next.epoch = s.epoch + 1;
    if (!Update(next, absent, "membership")) return;
    local->AdvanceEpoch(next.epoch);
    for (const std::string& n : linked) {
      if (!Contains(next.backups, n) && !Contains(next.joining, n)) local->RemoveLink(n);
      // Moved back to joining after a failure: a fresh link and transfer follow.
      if (Contains(next.joining, n) && Contains(s.backups, n)) local->RemoveLink(n);
    }
    return;  // the next round works from the map as written
  }
  for (const std::string& n : linked) {
    if (!Contains(s.backups, n) && !Contains(s.joining, n)) {
      local->RemoveLink(n);
      join_links_.erase({s.id, n});
    }
  }
  if (Split(view, s, local)) return;
  AttachJoining(view, s, local, linked);
  if (Merge(view, s, local)) return;  // the keys it copies in are outside its range until done
  // What a split left behind (keys now another shard's), a bounded batch a round.
  local->PurgeOutsideRange(kPurgeBatch);
}

void ClusterNode::AttachJoining(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                                const std::shared_ptr<ShardReplica>& local,
                                const std::vector<std::string>& linked) {
  std::vector<std::string> nodes;
  for (const std::string& j : s.joining) {
    if (Contains(linked, j)) continue;
    nodes.push_back(j);
    join_links_.insert({s.id, j});
  }
  // This primary's log can extend a state a joiner kept.
  AttachNodes(view, s, local, nodes, options_.durable);
}

void ClusterNode::AttachNodes(const cluster::ClusterView& view, const cluster::ShardInfo& s,
                              const std::shared_ptr<ShardReplica>& local,
                              const std::vector<std::string>& nodes, bool delta) {
  const absl::Time now = clock_->Now();
  for (const std::string& j : nodes) {
    if (!view.IsLive(j)) continue;
    auto retry = link_retry_.find(j);
    if (retry != link_retry_.end() && now < retry->second.after) continue;
    const cluster::NodeInfo& info = view.nodes.at(j);
    const std::shared_ptr<const rpc::Credentials> credentials =
        options_.credentials ? options_.credentials() : nullptr;
    absl::StatusOr<std::shared_ptr<ReplicaLink>> link = ReplicaLink::Open(
        engine_, options_.policy, j, info.rpc_address, credentials.get(), options_.link_timeout,
        clock_, options_.network_cut,
        options_.metrics != nullptr ? options_.metrics->ForBackup(j) : nullptr, options_.link_env);
    absl::Status st = link.status();
    if (st.ok()) {
      proto::AttachRequest req;
      req.set_shard(s.id);
      req.set_epoch(s.epoch);
      req.set_primary(name());
      req.set_arena_bytes(options_.arena_bytes);
      req.set_delta(delta);
      st = (*link)->Attach(req, options_.link_timeout);
    }
    if (!st.ok()) {
      Log(LogLevel::kWarning,
          absl::StrCat("cluster: shard ", s.id, ": attaching ", j, ": ", st.message()));
      LinkRetry& r = link_retry_[j];
      r.backoff = r.backoff == absl::ZeroDuration() ? kFirstLinkRetry
                                                    : std::min(2 * r.backoff, kMaxLinkRetry);
      r.after = now + r.backoff;
      continue;
    }
    link_retry_.erase(j);
    // Its catch-up wakes this thread (the promotion need not wait for the next round).
    local->SetProgressHook([wake = wake_] { wake->Signal(); });
    const proto::AttachResponse attached = (*link)->attached();
    const uint64_t bytes = local->AddLink(*std::move(link), attached, now);
    if (options_.metrics != nullptr) options_.metrics->AddCatchupBytes(bytes);
  }
}

}  // namespace unloadkv::server
