// The client protocol (proto/kv.proto) on the server: decodes each request, checks it, applies
// it to the KvStore and answers. Handlers run on the engine worker that received the request
// (the server's event loop) and never block beyond the store's short critical sections.
#ifndef UNLOADKV_SERVER_KV_SERVICE_H_
#define UNLOADKV_SERVER_KV_SERVICE_H_

#include <atomic>
#include <functional>

#include "proto/kv.pb.h"
#include "server/kv_store.h"
#include "server/server_metrics.h"
#include "transport/base/clock.h"
#include "transport/rpc/rpc.h"

namespace unloadkv::server {

// Thread-safe. The store, metrics (nullable) and clock must outlive the service.
class KvService {
 public:
  // `fill_stats` adds what only the server knows (connections, transport) to a Stats answer.
  // Grants name slots as `arena_addr` + offset in region `arena_rkey` (the registered arena).
  KvService(KvStore* store, uint64_t arena_addr, uint32_t arena_rkey, ServerMetrics* metrics,
            const Clock* clock, std::function<void(proto::StatsResponse*)> fill_stats);

  // Registers every method of proto::Method. Responders' peer() is the client id.
  void RegisterWith(rpc::RpcServer* rpc);
  // From now on every request is answered UNAVAILABLE ("shutting down").
  void SetStopping() { stopping_ = true; }

  uint64_t value_writes(proto::WritePath path) const { return value_writes_[path].load(); }

 private:
  template <typename Req, typename Resp>
  void Handle(proto::Method method, absl::string_view bytes, rpc::Responder r,
              absl::StatusOr<Resp> (KvService::*fn)(uint64_t, const Req&));

  absl::StatusOr<proto::GrantResponse> Grant(uint64_t peer, const proto::GrantRequest& req);
  absl::StatusOr<proto::PutResponse> Put(uint64_t peer, const proto::PutRequest& req);
  absl::StatusOr<proto::GetResponse> Get(uint64_t peer, const proto::GetRequest& req);
  absl::StatusOr<proto::DeleteResponse> Delete(uint64_t peer, const proto::DeleteRequest& req);
  absl::StatusOr<proto::ScanResponse> Scan(uint64_t peer, const proto::ScanRequest& req);
  absl::StatusOr<proto::StatsResponse> Stats(uint64_t peer, const proto::StatsRequest& req);
  absl::StatusOr<proto::PingResponse> Ping(uint64_t peer, const proto::PingRequest& req);

  KvStore* store_;
  const uint64_t arena_addr_;
  const uint32_t arena_rkey_;
  ServerMetrics* metrics_;
  const Clock* clock_;
  std::function<void(proto::StatsResponse*)> fill_stats_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> value_writes_[3] = {};
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_KV_SERVICE_H_
