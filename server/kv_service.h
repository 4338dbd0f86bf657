// The client protocol (proto/kv.proto) and the replication protocol (proto/replication.proto)
// on the server: decodes each request, checks it, applies it to the shard replica it concerns
// and answers. Handlers run on the engine worker that received the request (the server's
// event loop) and never block: a write that must be replicated is answered from the callback
// that commits it, a read that needs a barrier from the barrier's callback.
//
// Who may ask what: every request is checked against the identity its connection proved at
// admission (rpc::Peer), never against what the request says. The method needs a role the
// user holds (GRANT, PUT, GET, DELETE, SCAN: client or admin; STATS, PING: any; REPLICA_ATTACH,
// REPLICATE: node), and a node request must also be backed by the cluster map (Hooks::
// authorize_node: the sender is the shard's primary at the request's epoch and the map places
// the shard on this node). A refusal is PERMISSION_DENIED, changes nothing, is counted
// (unloadkv_requests_denied_total) and logged (at most once a second).
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
#include "server/grant_windows.h"
#include "server/server_metrics.h"
#include "server/shard_table.h"
#include "transport/base/clock.h"
#include "transport/base/logging.h"
#include "transport/rpc/rpc.h"

namespace unloadkv::server {

// Thread-safe. The table, metrics (nullable) and clock must outlive the service.
class KvService {
 public:
  struct Hooks {
    // Adds what only the server knows (connections, transport) to a Stats answer.
    std::function<void(proto::StatsResponse*)> fill_stats;
    // Whether this node may serve reads locally (always, on a single node).
    std::function<bool()> lease_valid;
    // Whether node `sender` may send a node request (REPLICA_ATTACH when `attach`, else
    // REPLICATE) for `shard` at `epoch`, by the cluster map (ClusterNode::AuthorizeNodeRequest):
    // OK, or PERMISSION_DENIED with *reason set to the metric's label. Empty on a single
    // node, which refuses node requests outright.
    std::function<absl::Status(const std::string& sender, uint32_t shard, uint64_t epoch,
                               bool attach, std::string* reason)>
        authorize_node;
    // Fault injection (nullable): while set, requests from other nodes go unanswered, as if
    // the network to them were down.
    const std::atomic<bool>* network_cut = nullptr;
    // Memory protection (nullable: off): the windows of clients' grants.
    GrantWindows* grant_windows = nullptr;
  };
  KvService(ShardTable* shards, ServerMetrics* metrics, const Clock* clock, Hooks hooks);

  // Registers every method of proto::Method. Responders' peer() is the client id.
  void RegisterWith(rpc::RpcServer* rpc);
  // From now on every request is answered UNAVAILABLE ("shutting down").
  void SetStopping() { stopping_ = true; }

  uint64_t value_writes(proto::WritePath path) const { return value_writes_[path].load(); }

 private:
  template <typename Resp>
  using Reply = std::function<void(absl::StatusOr<Resp>)>;
  using Peer = rpc::Peer;
  // One request being served: what its handler and continuations share. Taken from a pool of
  // the receiving thread when the request arrives and given back once it is answered (Finish),
  // so a continuation captures one pointer (no allocation) and the decoded request's and the
  // answer's strings keep their capacity (issue 39). Exactly one Finish per Call.
  template <typename Req, typename Resp>
  struct Call {
    KvService* service = nullptr;
    proto::Method method = proto::Method();
    absl::Time start;
    rpc::Responder responder;
    Req req;
    Resp resp;
    std::shared_ptr<ShardReplica> replica;  // the one the request concerns, once known
    uint64_t generation = 0;                // how many times it was given back
  };
  using GrantCall = Call<proto::GrantRequest, proto::GrantResponse>;
  using PutCall = Call<proto::PutRequest, proto::PutResponse>;
  using GetCall = Call<proto::GetRequest, proto::GetResponse>;
  // Answers `c` (with c->resp when `status` is OK), counts it, and gives it back.
  template <typename Req, typename Resp>
  static void Finish(Call<Req, Resp>* c, const absl::Status& status);
  // A Call for the request in `bytes`, or null when it was answered already (stopping, a role
  // that may not call `method`, a request that does not parse).
  template <typename Req, typename Resp>
  Call<Req, Resp>* Begin(proto::Method method, absl::string_view bytes, rpc::Responder r);
  // Registers a handler that answers through its Call (the data path: GRANT, PUT, GET).
  template <typename Req, typename Resp>
  void Register(rpc::RpcServer* rpc, proto::Method method,
                void (KvService::*fn)(Call<Req, Resp>* c));
  // Registers a handler that answers through a Reply (which must run exactly once).
  template <typename Req, typename Resp>
  void Register(rpc::RpcServer* rpc, proto::Method method,
                void (KvService::*fn)(const Peer&, const Req&, Reply<Resp>));
  // PERMISSION_DENIED for `why`, counted under `reason` and logged.
  absl::Status Deny(proto::Method method, const Peer& peer, absl::string_view reason,
                    absl::string_view why);
  // OK when `peer` may send node request `method` for `shard` at `epoch`.
  absl::Status AuthorizeNode(proto::Method method, const Peer& peer, uint32_t shard,
                             uint64_t epoch);

  void Grant(GrantCall* c);
  void Put(PutCall* c);
  // Put's second half, once the grant's window (if any) ended: spends the grant, publishes.
  void Publish(PutCall* c);
  // An inline PUT's (PutRequest.value): InvalidArgument unless it is well formed (size within
  // kMaxInlineValueBytes and equal to value_size, no grant); OK for a granted PUT.
  static absl::Status CheckInline(const proto::PutRequest& req);
  // An inline PUT's second half: the value (or the merge of the update) copied into a slot of
  // the store's own, published.
  void PublishInline(PutCall* c);
  // Submits `m` to the PUT's replica and answers once it commits; counts it under `path`.
  void Commit(PutCall* c, KvStore::Mutation m, proto::WritePath path);
  void Get(GetCall* c);
  void Delete(const Peer& peer, const proto::DeleteRequest& req,
              Reply<proto::DeleteResponse> reply);
  void Scan(const Peer& peer, const proto::ScanRequest& req, Reply<proto::ScanResponse> reply);
  void Stats(const Peer& peer, const proto::StatsRequest& req, Reply<proto::StatsResponse> reply);
  void Ping(const Peer& peer, const proto::PingRequest& req, Reply<proto::PingResponse> reply);
  void Attach(const Peer& peer, const proto::AttachRequest& req,
              Reply<proto::AttachResponse> reply);
  void Replicate(const Peer& peer, const proto::ReplicateRequest& req,
                 Reply<proto::ReplicateResponse> reply);
  // Runs `read` now when the lease allows, else after a barrier; ABORTED when the barrier
  // finds this node deposed.
  void Read(const std::shared_ptr<ShardReplica>& replica, std::function<void(absl::Status)> read);

  ShardTable* shards_;
  ServerMetrics* metrics_;
  const Clock* clock_;
  const Hooks hooks_;
  std::atomic<bool> stopping_{false};
  ThrottledLog denials_log_{absl::Seconds(1)};
  std::atomic<uint64_t> value_writes_[4] = {};  // by proto::WritePath
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_KV_SERVICE_H_
