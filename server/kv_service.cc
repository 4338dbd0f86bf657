#include "server/kv_service.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::server {

KvService::KvService(KvStore* store, uint64_t arena_addr, uint32_t arena_rkey,
                     ServerMetrics* metrics, const Clock* clock,
                     std::function<void(proto::StatsResponse*)> fill_stats)
    : store_(store),
      arena_addr_(arena_addr),
      arena_rkey_(arena_rkey),
      metrics_(metrics),
      clock_(clock),
      fill_stats_(std::move(fill_stats)) {}

template <typename Req, typename Resp>
void KvService::Handle(proto::Method method, absl::string_view bytes, rpc::Responder r,
                       absl::StatusOr<Resp> (KvService::*fn)(uint64_t, const Req&)) {
  const absl::Time start = clock_->Now();
  absl::StatusOr<Resp> resp;
  Req req;
  if (stopping_) {
    resp = absl::UnavailableError("server shutting down");
  } else if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    resp = absl::InvalidArgumentError(
        absl::StrCat(proto::Method_Name(method), ": request does not parse"));
  } else {
    resp = (this->*fn)(r.peer(), req);
  }
  if (metrics_ != nullptr) metrics_->OnRpc(method, resp.status(), clock_->Now() - start);
  if (resp.ok()) {
    r.Reply(absl::OkStatus(), resp->SerializeAsString());
  } else {
    r.Reply(resp.status());
  }
}

void KvService::RegisterWith(rpc::RpcServer* rpc) {
  rpc->Register(proto::GRANT, [this](absl::string_view b, rpc::Responder r) {
    Handle(proto::GRANT, b, std::move(r), &KvService::Grant);
  });
  rpc->Register(proto::PUT, [this](absl::string_view b, rpc::Responder r) {
    Handle(proto::PUT, b, std::move(r), &KvService::Put);
  });
  rpc->Register(proto::GET, [this](absl::string_view b, rpc::Responder r) {
    Handle(proto::GET, b, std::move(r), &KvService::Get);
  });
  rpc->Register(proto::DELETE, [this](absl::string_view b, rpc::Responder r) {
    Handle(proto::DELETE, b, std::move(r), &KvService::Delete);
  });
  rpc->Register(proto::SCAN, [this](absl::string_view b, rpc::Responder r) {
    Handle(proto::SCAN, b, std::move(r), &KvService::Scan);
  });
  rpc->Register(proto::STATS, [this](absl::string_view b, rpc::Responder r) {
    Handle(proto::STATS, b, std::move(r), &KvService::Stats);
  });
  rpc->Register(proto::PING, [this](absl::string_view b, rpc::Responder r) {
    Handle(proto::PING, b, std::move(r), &KvService::Ping);
  });
}

absl::StatusOr<proto::PingResponse> KvService::Ping(uint64_t, const proto::PingRequest&) {
  return proto::PingResponse();
}

absl::StatusOr<proto::GrantResponse> KvService::Grant(uint64_t peer,
                                                      const proto::GrantRequest& req) {
  absl::StatusOr<std::vector<KvStore::Grant>> grants =
      store_->GrantSlots(peer, req.size(), req.count());
  if (!grants.ok()) return grants.status();
  proto::GrantResponse resp;
  for (const KvStore::Grant& g : *grants) {
    proto::SlotGrant* pg = resp.add_grants();
    pg->set_grant_id(g.id);
    pg->set_addr(arena_addr_ + g.slot.offset);
    pg->set_rkey(arena_rkey_);
    pg->set_capacity(g.slot.capacity);
  }
  return resp;
}

absl::StatusOr<proto::PutResponse> KvService::Put(uint64_t peer, const proto::PutRequest& req) {
  absl::StatusOr<uint64_t> v = store_->Put(peer, req.key(), req.grant_id(), req.value_size());
  if (!v.ok()) return v.status();
  const int path = proto::WritePath_IsValid(req.value_path()) ? req.value_path() : 0;
  value_writes_[path].fetch_add(1, std::memory_order_relaxed);
  if (metrics_ != nullptr) metrics_->OnValueWrite(static_cast<proto::WritePath>(path));
  proto::PutResponse resp;
  resp.set_version(*v);
  return resp;
}

absl::StatusOr<proto::GetResponse> KvService::Get(uint64_t, const proto::GetRequest& req) {
  absl::StatusOr<KvStore::Value> v = store_->Get(req.key());
  if (!v.ok()) return v.status();
  proto::GetResponse resp;
  resp.set_value(std::move(v->bytes));
  resp.set_version(v->version);
  return resp;
}

absl::StatusOr<proto::DeleteResponse> KvService::Delete(uint64_t, const proto::DeleteRequest& req) {
  absl::StatusOr<uint64_t> v = store_->Delete(req.key());
  if (!v.ok()) return v.status();
  proto::DeleteResponse resp;
  resp.set_version(*v);
  return resp;
}

absl::StatusOr<proto::ScanResponse> KvService::Scan(uint64_t, const proto::ScanRequest& req) {
  absl::StatusOr<KvStore::ScanResult> r = store_->Scan(req.start_key(), req.end_key(), req.limit());
  if (!r.ok()) return r.status();
  proto::ScanResponse resp;
  for (auto& [k, v] : r->items) {
    resp.add_keys(std::move(k));
    resp.add_values(std::move(v));
  }
  resp.set_more(r->more);
  return resp;
}

absl::StatusOr<proto::StatsResponse> KvService::Stats(uint64_t, const proto::StatsRequest&) {
  KvStore::Stats s = store_->stats();
  proto::StatsResponse resp;
  resp.set_keys(s.keys);
  resp.set_arena_bytes(s.arena_bytes);
  resp.set_arena_used_bytes(s.arena_used_bytes);
  resp.set_offload_writes(value_writes(proto::OFFLOAD));
  resp.set_unload_writes(value_writes(proto::UNLOAD));
  if (fill_stats_) fill_stats_(&resp);
  return resp;
}

}  // namespace unloadkv::server
