// A primary's connection to one backup of one shard (docs/cluster.md, "Replication"): an
// engine connection with its own path policy, so that replication writes are offloaded or
// unloaded by the latency this connection observes, carrying each PUT's value write into the
// backup's mirrored arena followed by the REPLICATE request that names it.
//
// Order: items go out in the order they were enqueued, each item's writes before its request
// (engine invariant 2 then guarantees the backup handles the request after the writes are
// visible). At most kMaxOutstanding requests are unanswered; the rest wait in the queue.
//
// Thread-safety: Open and Attach block (bootstrap exchange, one round trip): control thread
// only. Enqueue, CheckDeadlines and the accessors may be called from any thread; item
// callbacks run on engine workers or inside CheckDeadlines, never under the link's lock.
#ifndef UNLOADKV_SERVER_REPLICA_LINK_H_
#define UNLOADKV_SERVER_REPLICA_LINK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/replication.pb.h"
#include "server/cluster_metrics.h"
#include "transport/base/clock.h"
#include "transport/base/mutex.h"
#include "transport/engine/engine.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/bootstrap.h"
#include "transport/rpc/rpc.h"

namespace unloadkv::server {

// How a link reaches a node. Empty members: the TCP bootstrap exchange and blocking waits; a
// simulation hands both to its world.
struct LinkEnv {
  rpc::BootstrapDialer dial;    // the bootstrap exchange with the node at an address
  rpc::RpcClient::Waiter wait;  // for Open's and Attach's round trips
};

class ReplicaLink {
 public:
  static constexpr int kMaxOutstanding = 256;
  // A REPLICATE request unanswered this long fails the link's item (DEADLINE_EXCEEDED), and
  // the primary then drops the backup, which rejoins by state transfer. Far longer than an
  // answer takes (a backup applies a request in milliseconds, a state-transfer one too, even
  // on a slowed host), and short because every write of the shard waits meanwhile: a backup
  // that stops answering on a live connection (cut off from the cluster), with no later
  // record to expose the gap, held them up for 30 s under the old value (cluster_sim seed
  // 216).
  static constexpr absl::Duration kRequestTimeout = absl::Seconds(5);

  // One value write: `local` (in a region registered with the engine) to the backup's arena
  // at `remote_offset`.
  struct ValueWrite {
    rnic::ScatterGatherEntry local;
    uint64_t remote_offset = 0;
  };
  struct Item {
    std::vector<ValueWrite> writes;
    proto::ReplicateRequest request;
    std::function<void(absl::StatusOr<proto::ReplicateResponse>)> done;
  };

  // Connects to the kvserver `node` at `address` (its --listen), proving `credentials` (this
  // node's entry of the auth file; nullable: none): bootstrap exchange, then a PING round
  // trip, within `timeout`. Blocks.
  static absl::StatusOr<std::shared_ptr<ReplicaLink>> Open(
      engine::Engine* engine, const std::string& policy, const std::string& node,
      const std::string& address, const rpc::Credentials* credentials, absl::Duration timeout,
      const Clock* clock, const std::atomic<bool>* cut = nullptr, LinkMetrics* metrics = nullptr,
      const LinkEnv& env = LinkEnv());
  ~ReplicaLink();

  // Opens the shard on the backup and learns where its arena is, and what state it kept
  // (attached()). Blocks.
  absl::Status Attach(const proto::AttachRequest& request, absl::Duration timeout);
  // The backup's answer to the last Attach.
  const proto::AttachResponse& attached() const { return attached_; }
  // Keeps `resource` (memory the link's writes read) until the link is destroyed.
  void Hold(std::shared_ptr<void> resource);

  // Queues `item` behind everything queued before; Flush sends what the queue holds. Push
  // never sends (so it may be called under a caller's lock that the items' callbacks take);
  // Flush may run callbacks of failed sends inline.
  void Push(Item item);
  void Flush();
  void Enqueue(Item item) {
    Push(std::move(item));
    Flush();
  }
  // Fails items whose request timed out, or every item once the connection failed.
  void CheckDeadlines();

  const std::string& node() const { return node_; }
  bool failed() const { return conn_->failed(); }
  size_t queued() const;

 private:
  ReplicaLink() = default;
  void Drain();
  void Send(Item item);

  // One round trip on rpc_, blocking or through env_.wait.
  absl::StatusOr<std::string> CallAndWait(uint16_t method, std::string request,
                                          absl::Duration timeout);

  // Released last: what the link's writes may still read.
  std::vector<std::shared_ptr<void>> held_ ABSL_GUARDED_BY(mu_);
  proto::AttachResponse attached_;  // set by Attach, before any Push
  std::string node_;
  std::string address_;
  LinkEnv env_;
  // Fault injection: while set, nothing is sent (items wait in the queue), as if the network
  // to the backup were down.
  const std::atomic<bool>* cut_ = nullptr;
  LinkMetrics* metrics_ = nullptr;  // nullable; outlives the link
  std::shared_ptr<engine::Connection> conn_;
  std::unique_ptr<rpc::RpcClient> rpc_;
  uint64_t arena_addr_ = 0;  // set by Attach, before any Enqueue
  uint32_t arena_rkey_ = 0;

  mutable Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_REPLICA_LINK_H_
