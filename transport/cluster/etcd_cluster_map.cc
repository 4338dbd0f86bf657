#include "transport/cluster/etcd_cluster_map.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/cluster/etcd_gateway.pb.h"
#include "transport/cluster/map_records.h"

namespace unloadkv::cluster {

absl::StatusOr<std::unique_ptr<EtcdClusterMap>> EtcdClusterMap::Open(absl::string_view endpoints,
                                                                     absl::string_view cluster,
                                                                     const EtcdSecurity& security) {
  if (absl::Status s = CheckClusterName(cluster); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<EtcdGateway>> gateway =
      EtcdGateway::Create(endpoints, kEtcdRequestTimeout, security);
  if (!gateway.ok()) return gateway.status();
  return std::unique_ptr<EtcdClusterMap>(
      new EtcdClusterMap(*std::move(gateway), std::string(cluster)));
}

std::string EtcdClusterMap::Describe() const {
  return absl::StrCat("etcd at ", gateway_->endpoints(), ", cluster ", cluster_);
}

absl::Status EtcdClusterMap::Annotate(const absl::Status& s) const {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(Describe(), ": ", s.message()));
}

absl::StatusOr<ClusterView> EtcdClusterMap::Read() {
  etcd::RangeRequest req;
  const std::string prefix = ClusterPrefix(cluster_);
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  etcd::RangeResponse resp;
  if (absl::Status s = gateway_->Call("/v3/kv/range", req, &resp); !s.ok()) return Annotate(s);
  std::vector<StoredKey> keys;
  keys.reserve(resp.kvs_size());
  for (const etcd::KeyValue& kv : resp.kvs()) {
    keys.push_back({kv.key(), kv.value(), kv.mod_revision()});
  }
  absl::StatusOr<ClusterView> view = AssembleView(cluster_, resp.header().revision(), keys);
  if (!view.ok()) return Annotate(view.status());
  return view;
}

absl::StatusOr<int64_t> EtcdClusterMap::Create(int replicas, const std::vector<ShardInfo>& shards) {
  etcd::TxnRequest txn;
  etcd::Compare* absent = txn.add_compare();
  absent->set_key(ConfigKey(cluster_));
  absent->set_target(etcd::Compare::CREATE);
  absent->set_result(etcd::Compare::EQUAL);
  absent->set_create_revision(0);  // the config key does not exist
  auto put = [&txn](std::string key, std::string value) {
    etcd::PutRequest* p = txn.add_success()->mutable_request_put();
    p->set_key(std::move(key));
    p->set_value(std::move(value));
  };
  put(ConfigKey(cluster_), EncodeConfig(static_cast<int>(shards.size()), replicas, {}));
  for (const ShardInfo& s : shards) put(ShardKey(cluster_, s.id), EncodeShard(s));
  etcd::TxnResponse resp;
  if (absl::Status s = gateway_->Call("/v3/kv/txn", txn, &resp); !s.ok()) return Annotate(s);
  if (!resp.succeeded()) {
    return absl::AlreadyExistsError(
        absl::StrCat("cluster \"", cluster_, "\" already has a map in ", Describe()));
  }
  return resp.header().revision();
}

absl::StatusOr<int64_t> EtcdClusterMap::UpdateShard(const ShardInfo& shard,
                                                    const std::vector<std::string>& absent_nodes) {
  etcd::TxnRequest txn;
  etcd::Compare* same = txn.add_compare();
  same->set_key(ShardKey(cluster_, shard.id));
  same->set_target(etcd::Compare::MOD);
  same->set_result(etcd::Compare::EQUAL);
  same->set_mod_revision(shard.mod_revision);
  if (shard.mod_revision == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", shard.id, " was not read from the map (no revision)"));
  }
  for (const std::string& n : absent_nodes) {
    etcd::Compare* gone = txn.add_compare();
    gone->set_key(NodeKey(cluster_, n));
    gone->set_target(etcd::Compare::CREATE);
    gone->set_result(etcd::Compare::EQUAL);
    gone->set_create_revision(0);
  }
  etcd::PutRequest* p = txn.add_success()->mutable_request_put();
  p->set_key(ShardKey(cluster_, shard.id));
  p->set_value(EncodeShard(shard));
  etcd::TxnResponse resp;
  if (absl::Status s = gateway_->Call("/v3/kv/txn", txn, &resp); !s.ok()) return Annotate(s);
  if (!resp.succeeded()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", shard.id, " changed since revision ", shard.mod_revision,
                     " (or a node thought gone is registered); re-read the map"));
  }
  return resp.header().revision();
}

namespace {
// A comparison of `key`'s mod revision with `revision` (the key unchanged since then).
void CompareMod(etcd::TxnRequest* txn, std::string key, int64_t revision) {
  etcd::Compare* c = txn->add_compare();
  c->set_key(std::move(key));
  c->set_target(etcd::Compare::MOD);
  c->set_result(etcd::Compare::EQUAL);
  c->set_mod_revision(revision);
}
}  // namespace

absl::StatusOr<int64_t> EtcdClusterMap::SplitShard(const ShardInfo& left, const ShardInfo& right,
                                                   const ClusterView& read) {
  if (absl::Status s = CheckSplit(read, left, right); !s.ok()) return s;
  etcd::TxnRequest txn;
  CompareMod(&txn, ShardKey(cluster_, left.id), left.mod_revision);
  CompareMod(&txn, ConfigKey(cluster_), read.config_revision);
  etcd::Compare* absent = txn.add_compare();
  absent->set_key(ShardKey(cluster_, right.id));
  absent->set_target(etcd::Compare::CREATE);
  absent->set_result(etcd::Compare::EQUAL);
  absent->set_create_revision(0);
  auto put = [&txn](std::string key, std::string value) {
    etcd::PutRequest* p = txn.add_success()->mutable_request_put();
    p->set_key(std::move(key));
    p->set_value(std::move(value));
  };
  put(ShardKey(cluster_, left.id), EncodeShard(left));
  put(ShardKey(cluster_, right.id), EncodeShard(right));
  put(ConfigKey(cluster_), EncodeConfig(read.shards + 1, read.replicas, read.policy));
  etcd::TxnResponse resp;
  if (absl::Status s = gateway_->Call("/v3/kv/txn", txn, &resp); !s.ok()) return Annotate(s);
  if (!resp.succeeded()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", left.id, " or the config changed since revision ", left.mod_revision,
                     ", or shard ", right.id, " exists; re-read the map"));
  }
  return resp.header().revision();
}

absl::StatusOr<int64_t> EtcdClusterMap::MergeShards(const ShardInfo& merged, uint32_t right_id,
                                                    const ClusterView& read) {
  if (absl::Status s = CheckMerge(read, merged, right_id); !s.ok()) return s;
  etcd::TxnRequest txn;
  CompareMod(&txn, ShardKey(cluster_, merged.id), read.ShardById(merged.id)->mod_revision);
  CompareMod(&txn, ShardKey(cluster_, right_id), read.ShardById(right_id)->mod_revision);
  CompareMod(&txn, ConfigKey(cluster_), read.config_revision);
  etcd::PutRequest* p = txn.add_success()->mutable_request_put();
  p->set_key(ShardKey(cluster_, merged.id));
  p->set_value(EncodeShard(merged));
  txn.add_success()->mutable_request_delete_range()->set_key(ShardKey(cluster_, right_id));
  etcd::PutRequest* c = txn.add_success()->mutable_request_put();
  c->set_key(ConfigKey(cluster_));
  c->set_value(EncodeConfig(read.shards - 1, read.replicas, read.policy));
  etcd::TxnResponse resp;
  if (absl::Status s = gateway_->Call("/v3/kv/txn", txn, &resp); !s.ok()) return Annotate(s);
  if (!resp.succeeded()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", merged.id, ", shard ", right_id,
                     " or the config changed since they were read; re-read the map"));
  }
  return resp.header().revision();
}

absl::StatusOr<int64_t> EtcdClusterMap::SetPolicy(const PlacementPolicy& policy,
                                                  const ClusterView& read) {
  etcd::TxnRequest txn;
  CompareMod(&txn, ConfigKey(cluster_), read.config_revision);
  etcd::PutRequest* p = txn.add_success()->mutable_request_put();
  p->set_key(ConfigKey(cluster_));
  p->set_value(EncodeConfig(read.shards, read.replicas, policy));
  etcd::TxnResponse resp;
  if (absl::Status s = gateway_->Call("/v3/kv/txn", txn, &resp); !s.ok()) return Annotate(s);
  if (!resp.succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat("the config changed since revision ",
                                                      read.config_revision, "; re-read the map"));
  }
  return resp.header().revision();
}

absl::Status EtcdClusterMap::PublishLoad(const ShardLoad& load, LeaseId lease) {
  etcd::PutRequest req;
  req.set_key(LoadKey(cluster_, load.shard));
  req.set_value(EncodeLoad(load));
  req.set_lease(lease);
  etcd::PutResponse resp;
  absl::Status s = gateway_->Call("/v3/kv/put", req, &resp);
  if (s.code() == absl::StatusCode::kNotFound) {  // etcd: "requested lease not found"
    return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
  }
  return Annotate(s);
}

absl::StatusOr<bool> EtcdClusterMap::Campaign(const std::string& node, LeaseId lease) {
  const std::string key = PlacerKey(cluster_);
  etcd::TxnRequest txn;
  etcd::Compare* absent = txn.add_compare();
  absent->set_key(key);
  absent->set_target(etcd::Compare::CREATE);
  absent->set_result(etcd::Compare::EQUAL);
  absent->set_create_revision(0);
  etcd::PutRequest* p = txn.add_success()->mutable_request_put();
  p->set_key(key);
  p->set_value(EncodePlacer(node));
  p->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(key);
  etcd::TxnResponse resp;
  absl::Status s = gateway_->Call("/v3/kv/txn", txn, &resp);
  if (s.code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
  }
  if (!s.ok()) return Annotate(s);
  if (resp.succeeded()) return true;
  for (const etcd::ResponseOp& op : resp.responses()) {
    for (const etcd::KeyValue& kv : op.response_range().kvs()) {
      absl::StatusOr<std::string> holder = DecodePlacer(kv.key(), kv.value());
      if (!holder.ok()) return Annotate(holder.status());
      return *holder == node;
    }
  }
  return false;  // the holder's lease ended between the compare and the read: try again later
}

absl::StatusOr<LeaseId> EtcdClusterMap::GrantLease(absl::Duration ttl) {
  if (ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("a lease's TTL must be at least 1 s");
  }
  etcd::LeaseGrantRequest req;
  req.set_ttl(static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(ttl))));
  etcd::LeaseGrantResponse resp;
  if (absl::Status s = gateway_->Call("/v3/lease/grant", req, &resp); !s.ok()) return Annotate(s);
  if (!resp.error().empty() || resp.id() == 0) {
    return Annotate(absl::UnavailableError(absl::StrCat("lease grant failed: ", resp.error())));
  }
  return resp.id();
}

absl::StatusOr<absl::Duration> EtcdClusterMap::KeepAlive(LeaseId lease) {
  etcd::LeaseKeepAliveRequest req;
  req.set_id(lease);
  etcd::KeepAliveStreamItem item;
  if (absl::Status s = gateway_->Call("/v3/lease/keepalive", req, &item); !s.ok()) {
    return Annotate(s);
  }
  if (item.has_error()) {
    return Annotate(
        absl::Status(static_cast<absl::StatusCode>(item.error().code()), item.error().message()));
  }
  if (item.result().ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
  }
  return absl::Seconds(item.result().ttl());
}

absl::Status EtcdClusterMap::RevokeLease(LeaseId lease) {
  etcd::LeaseRevokeRequest req;
  req.set_id(lease);
  etcd::LeaseRevokeResponse resp;
  absl::Status s = gateway_->Call("/v3/lease/revoke", req, &resp);
  if (s.code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
  }
  return Annotate(s);
}

absl::Status EtcdClusterMap::RegisterNode(const NodeInfo& node, LeaseId lease) {
  if (absl::Status s = CheckNodeName(node.name); !s.ok()) return s;
  etcd::TxnRequest txn;
  etcd::Compare* absent = txn.add_compare();
  absent->set_key(NodeKey(cluster_, node.name));
  absent->set_target(etcd::Compare::CREATE);
  absent->set_result(etcd::Compare::EQUAL);
  absent->set_create_revision(0);
  etcd::PutRequest* p = txn.add_success()->mutable_request_put();
  p->set_key(NodeKey(cluster_, node.name));
  p->set_value(EncodeNode(node));
  p->set_lease(lease);
  etcd::TxnResponse resp;
  absl::Status s = gateway_->Call("/v3/kv/txn", txn, &resp);
  if (s.code() == absl::StatusCode::kNotFound) {  // etcd: "requested lease not found"
    return absl::NotFoundError(absl::StrCat("lease ", lease, " expired or was revoked"));
  }
  if (!s.ok()) return Annotate(s);
  if (!resp.succeeded()) {
    return absl::AlreadyExistsError(
        absl::StrCat("node \"", node.name, "\" is already registered in cluster \"", cluster_,
                     "\" (another kvserver uses that --node name, or a previous run of this node "
                     "whose lease has not expired yet: wait --lease_ttl_s)"));
  }
  return absl::OkStatus();
}

namespace {

// One etcd watch stream on the cluster's prefix, run by its own thread; reopened (from the
// revision after the last one seen) with backoff when etcd goes away.
class EtcdWatch : public MapWatch {
 public:
  EtcdWatch(EtcdGateway* gateway, std::string prefix, int64_t start_revision,
            std::function<void(int64_t)> on_change)
      : gateway_(gateway),
        prefix_(std::move(prefix)),
        next_revision_(start_revision),
        on_change_(std::move(on_change)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~EtcdWatch() override {
    stop_.store(true);
    thread_.join();
  }

 private:
  void Run() {
    absl::Duration backoff = absl::Milliseconds(100);
    bool reopened = false;
    while (!stop_.load()) {
      etcd::WatchRequest req;
      etcd::WatchCreateRequest* c = req.mutable_create_request();
      c->set_key(prefix_);
      c->set_range_end(PrefixEnd(prefix_));
      c->set_start_revision(next_revision_);
      const absl::Status s = gateway_->Stream(
          "/v3/watch", req,
          [&](absl::string_view line) {
            etcd::WatchStreamItem item;
            if (!FromGatewayJson(line, &item).ok() || item.has_error()) return false;
            const etcd::WatchResponse& w = item.result();
            if (w.canceled()) {
              // History compacted past next_revision_: reopen from the oldest revision kept;
              // the forced re-read after reopening covers what was compacted away.
              if (w.compact_revision() > 0) next_revision_ = w.compact_revision();
              return false;
            }
            backoff = absl::Milliseconds(100);
            int64_t latest = 0;
            for (const etcd::Event& e : w.events())
              latest = std::max(latest, e.kv().mod_revision());
            if (latest > 0) {
              next_revision_ = latest + 1;
              on_change_(latest);
            } else if (w.created() && reopened) {
              // Reopened after a break: changes may have been compacted away; a forced
              // re-read is always safe.
              on_change_(w.header().revision());
            }
            return !stop_.load();
          },
          &stop_);
      if (stop_.load()) return;
      log_.Log(LogLevel::kWarning,
               absl::StrCat("cluster map watch: ", s.ToString(), "; reopening"));
      reopened = true;
      const absl::Time until = absl::Now() + backoff;
      while (!stop_.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  }

  EtcdGateway* const gateway_;
  const std::string prefix_;
  int64_t next_revision_;  // only the watch thread touches it
  const std::function<void(int64_t)> on_change_;
  ThrottledLog log_{absl::Seconds(10)};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MapWatch>> EtcdClusterMap::Watch(
    std::function<void(int64_t revision)> on_change) {
  // Start from the revision after "now" so that no change between this call and the stream's
  // creation is missed; the first read also proves etcd is reachable.
  etcd::RangeRequest req;
  req.set_key(ConfigKey(cluster_));
  etcd::RangeResponse resp;
  if (absl::Status s = gateway_->Call("/v3/kv/range", req, &resp); !s.ok()) return Annotate(s);
  return std::unique_ptr<MapWatch>(new EtcdWatch(
      gateway_.get(), ClusterPrefix(cluster_), resp.header().revision() + 1, std::move(on_change)));
}

}  // namespace unloadkv::cluster
