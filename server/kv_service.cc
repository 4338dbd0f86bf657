#include "server/kv_service.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::server {
namespace {

absl::Status NotPrimary(absl::string_view what) {
  return absl::AbortedError(
      absl::StrCat("this node is not the serving primary of ", what, "; refresh the map"));
}

}  // namespace

KvService::KvService(ShardTable* shards, ServerMetrics* metrics, const Clock* clock,
                     std::function<void(proto::StatsResponse*)> fill_stats,
                     std::function<bool()> lease_valid, const std::atomic<bool>* network_cut)
    : shards_(shards),
      metrics_(metrics),
      clock_(clock),
      fill_stats_(std::move(fill_stats)),
      lease_valid_(std::move(lease_valid)),
      network_cut_(network_cut) {}

template <typename Req, typename Resp>
void KvService::Handle(proto::Method method, absl::string_view bytes, rpc::Responder r,
                       void (KvService::*fn)(uint64_t, const Req&, Reply<Resp>)) {
  const absl::Time start = clock_->Now();
  auto reply = [this, method, start, r](absl::StatusOr<Resp> resp) mutable {
    if (metrics_ != nullptr) metrics_->OnRpc(method, resp.status(), clock_->Now() - start);
    if (resp.ok()) {
      r.Reply(absl::OkStatus(), resp->SerializeAsString());
    } else {
      r.Reply(resp.status());
    }
  };
  Req req;
  if (stopping_) {
    reply(absl::UnavailableError("server shutting down"));
  } else if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    reply(absl::InvalidArgumentError(
        absl::StrCat(proto::Method_Name(method), ": request does not parse")));
  } else {
    (this->*fn)(r.peer(), req, std::move(reply));
  }
}

void KvService::RegisterWith(rpc::RpcServer* rpc) {
#define UNLOADKV_REGISTER(METHOD, FN)                                          \
  rpc->Register(proto::METHOD, [this](absl::string_view b, rpc::Responder r) { \
    Handle(proto::METHOD, b, std::move(r), &KvService::FN);                    \
  })
  UNLOADKV_REGISTER(GRANT, Grant);
  UNLOADKV_REGISTER(PUT, Put);
  UNLOADKV_REGISTER(GET, Get);
  UNLOADKV_REGISTER(DELETE, Delete);
  UNLOADKV_REGISTER(SCAN, Scan);
  UNLOADKV_REGISTER(STATS, Stats);
  UNLOADKV_REGISTER(PING, Ping);
  // Node-to-node requests: unanswered during an injected network cut.
  rpc->Register(proto::REPLICA_ATTACH, [this](absl::string_view b, rpc::Responder r) {
    if (network_cut_ != nullptr && network_cut_->load()) return;
    Handle(proto::REPLICA_ATTACH, b, std::move(r), &KvService::Attach);
  });
  rpc->Register(proto::REPLICATE, [this](absl::string_view b, rpc::Responder r) {
    if (network_cut_ != nullptr && network_cut_->load()) return;
    Handle(proto::REPLICATE, b, std::move(r), &KvService::Replicate);
  });
#undef UNLOADKV_REGISTER
}

void KvService::Ping(uint64_t, const proto::PingRequest&, Reply<proto::PingResponse> reply) {
  reply(proto::PingResponse());
}

void KvService::Read(const std::shared_ptr<ShardReplica>& replica,
                     std::function<void(absl::Status)> read) {
  if (lease_valid_()) return read(absl::OkStatus());
  replica->Barrier(std::move(read));
}

void KvService::Grant(uint64_t peer, const proto::GrantRequest& req,
                      Reply<proto::GrantResponse> reply) {
  std::shared_ptr<ShardReplica> replica = shards_->Get(req.shard());
  if (replica == nullptr || replica->role() != ShardReplica::Role::kPrimary) {
    return reply(NotPrimary(absl::StrCat("shard ", req.shard())));
  }
  absl::StatusOr<std::vector<KvStore::Grant>> grants =
      replica->store().GrantSlots(peer, req.size(), req.count());
  if (!grants.ok()) return reply(grants.status());
  proto::GrantResponse resp;
  for (const KvStore::Grant& g : *grants) {
    proto::SlotGrant* pg = resp.add_grants();
    pg->set_grant_id(g.id);
    pg->set_addr(replica->arena_addr() + g.slot.offset);
    pg->set_rkey(replica->arena_rkey());
    pg->set_capacity(g.slot.capacity);
  }
  reply(std::move(resp));
}

void KvService::Put(uint64_t peer, const proto::PutRequest& req, Reply<proto::PutResponse> reply) {
  if (absl::Status st = proto::CheckKey(req.key()); !st.ok()) return reply(st);
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.key());
  if (replica == nullptr) return reply(NotPrimary("the key's shard"));
  absl::StatusOr<KvStore::Mutation> m =
      req.merge_fields()
          ? replica->store().PrepareMerge(peer, req.key(), req.grant_id(), req.value_size())
          : replica->store().PreparePut(peer, req.key(), req.grant_id(), req.value_size());
  if (!m.ok()) return reply(m.status());
  const int path = proto::WritePath_IsValid(req.value_path()) ? req.value_path() : 0;
  value_writes_[path].fetch_add(1, std::memory_order_relaxed);
  if (metrics_ != nullptr) metrics_->OnValueWrite(static_cast<proto::WritePath>(path));
  replica->Submit(std::move(*m), [reply](absl::StatusOr<uint64_t> v) {
    if (!v.ok()) return reply(v.status());
    proto::PutResponse resp;
    resp.set_version(*v);
    reply(std::move(resp));
  });
}

void KvService::Get(uint64_t, const proto::GetRequest& req, Reply<proto::GetResponse> reply) {
  if (absl::Status st = proto::CheckKey(req.key()); !st.ok()) return reply(st);
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.key());
  if (replica == nullptr) return reply(NotPrimary("the key's shard"));
  Read(replica, [replica, key = req.key(), reply](absl::Status ok) {
    if (!ok.ok()) return reply(ok);
    absl::StatusOr<KvStore::Value> v = replica->store().Get(key);
    if (!v.ok()) return reply(v.status());
    proto::GetResponse resp;
    resp.set_value(std::move(v->bytes));
    resp.set_version(v->version);
    reply(std::move(resp));
  });
}

void KvService::Delete(uint64_t, const proto::DeleteRequest& req,
                       Reply<proto::DeleteResponse> reply) {
  if (absl::Status st = proto::CheckKey(req.key()); !st.ok()) return reply(st);
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.key());
  if (replica == nullptr) return reply(NotPrimary("the key's shard"));
  absl::StatusOr<KvStore::Mutation> m = replica->store().PrepareDelete(req.key());
  if (!m.ok()) return reply(m.status());
  replica->Submit(std::move(*m), [reply](absl::StatusOr<uint64_t> v) {
    if (!v.ok()) return reply(v.status());
    proto::DeleteResponse resp;
    resp.set_version(*v);
    reply(std::move(resp));
  });
}

void KvService::Scan(uint64_t, const proto::ScanRequest& req, Reply<proto::ScanResponse> reply) {
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.start_key());
  if (replica == nullptr || !replica->ContainsRange(req.start_key(), req.end_key())) {
    return reply(NotPrimary("the scanned range (a scan stays within one shard)"));
  }
  Read(replica, [replica, req, reply](absl::Status ok) {
    if (!ok.ok()) return reply(ok);
    absl::StatusOr<KvStore::ScanResult> r =
        replica->store().Scan(req.start_key(), req.end_key(), req.limit());
    if (!r.ok()) return reply(r.status());
    proto::ScanResponse resp;
    for (auto& [k, v] : r->items) {
      resp.add_keys(std::move(k));
      resp.add_values(std::move(v));
    }
    resp.set_more(r->more);
    reply(std::move(resp));
  });
}

void KvService::Stats(uint64_t, const proto::StatsRequest&, Reply<proto::StatsResponse> reply) {
  proto::StatsResponse resp;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
    if (r->role() != ShardReplica::Role::kPrimary) continue;
    KvStore::Stats s = r->store().stats();
    resp.set_keys(resp.keys() + s.keys);
    resp.set_arena_bytes(resp.arena_bytes() + s.arena_bytes);
    resp.set_arena_used_bytes(resp.arena_used_bytes() + s.arena_used_bytes);
  }
  resp.set_offload_writes(value_writes(proto::OFFLOAD));
  resp.set_unload_writes(value_writes(proto::UNLOAD));
  if (fill_stats_) fill_stats_(&resp);
  reply(std::move(resp));
}

void KvService::Attach(uint64_t peer, const proto::AttachRequest& req,
                       Reply<proto::AttachResponse> reply) {
  absl::StatusOr<std::shared_ptr<ShardReplica>> replica = shards_->GetOrCreate(req.shard());
  if (!replica.ok()) return reply(replica.status());
  reply((*replica)->Attach(req, peer));
}

void KvService::Replicate(uint64_t peer, const proto::ReplicateRequest& req,
                          Reply<proto::ReplicateResponse> reply) {
  std::shared_ptr<ShardReplica> replica = shards_->Get(req.shard());
  if (replica == nullptr) {
    return reply(absl::AbortedError(absl::StrCat("shard ", req.shard(), " is not held here")));
  }
  reply(replica->Apply(req, peer));
}

}  // namespace unloadkv::server
