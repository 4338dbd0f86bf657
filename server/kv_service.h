// The client protocol (proto/kv.proto) and the replication protocol (proto/replication.proto)
// on the server: decodes each request, checks it, applies it to the shard replica it concerns
// and answers. Handlers run on the engine worker that received the request (the server's
// event loop) and never block: a write that must be replicated is answered from the callback
// that commits it, a read that needs a barrier from the barrier's callback.
//
// Routing: a request about a key goes to the replica of this node that is the primary of the
// key's shard; without one the answer is ABORTED (refresh the map, retry at the primary).
// Reads are served locally while `lease_valid()` holds; otherwise each read first confirms
// through a barrier that every backup still follows this primary's epoch (docs/cluster.md).
#ifndef UNLOADKV_SERVER_KV_SERVICE_H_
#define UNLOADKV_SERVER_KV_SERVICE_H_

#include <atomic>
#include <functional>

#include "proto/kv.pb.h"
#include "proto/replication.pb.h"
#include "server/server_metrics.h"
#include "server/shard_table.h"
#include "transport/base/clock.h"
#include "transport/rpc/rpc.h"

namespace unloadkv::server {

// Thread-safe. The table, metrics (nullable) and clock must outlive the service.
class KvService {
 public:
  // `fill_stats` adds what only the server knows (connections, transport) to a Stats answer.
  // `lease_valid` says whether this node may serve reads locally (always, on a single node).
  // `network_cut` (nullable, fault injection): while set, replication requests from other
  // nodes go unanswered, as if the network to them were down.
  KvService(ShardTable* shards, ServerMetrics* metrics, const Clock* clock,
            std::function<void(proto::StatsResponse*)> fill_stats,
            std::function<bool()> lease_valid, const std::atomic<bool>* network_cut = nullptr);

  // Registers every method of proto::Method. Responders' peer() is the client id.
  void RegisterWith(rpc::RpcServer* rpc);
  // From now on every request is answered UNAVAILABLE ("shutting down").
  void SetStopping() { stopping_ = true; }

  uint64_t value_writes(proto::WritePath path) const { return value_writes_[path].load(); }

 private:
  template <typename Resp>
  using Reply = std::function<void(absl::StatusOr<Resp>)>;
  template <typename Req, typename Resp>
  void Handle(proto::Method method, absl::string_view bytes, rpc::Responder r,
              void (KvService::*fn)(uint64_t, const Req&, Reply<Resp>));

  void Grant(uint64_t peer, const proto::GrantRequest& req, Reply<proto::GrantResponse> reply);
  void Put(uint64_t peer, const proto::PutRequest& req, Reply<proto::PutResponse> reply);
  void Get(uint64_t peer, const proto::GetRequest& req, Reply<proto::GetResponse> reply);
  void Delete(uint64_t peer, const proto::DeleteRequest& req, Reply<proto::DeleteResponse> reply);
  void Scan(uint64_t peer, const proto::ScanRequest& req, Reply<proto::ScanResponse> reply);
  void Stats(uint64_t peer, const proto::StatsRequest& req, Reply<proto::StatsResponse> reply);
  void Ping(uint64_t peer, const proto::PingRequest& req, Reply<proto::PingResponse> reply);
  void Attach(uint64_t peer, const proto::AttachRequest& req, Reply<proto::AttachResponse> reply);
  void Replicate(uint64_t peer, const proto::ReplicateRequest& req,
                 Reply<proto::ReplicateResponse> reply);
  // Runs `read` now when the lease allows, else after a barrier; ABORTED when the barrier
  // finds this node deposed.
  void Read(const std::shared_ptr<ShardReplica>& replica, std::function<void(absl::Status)> read);

  ShardTable* shards_;
  ServerMetrics* metrics_;
  const Clock* clock_;
  std::function<void(proto::StatsResponse*)> fill_stats_;
  std::function<bool()> lease_valid_;
  const std::atomic<bool>* network_cut_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> value_writes_[3] = {};
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_KV_SERVICE_H_
