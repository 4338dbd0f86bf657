// The SDK in a cluster: the map, one NodeClient connection per primary node it has talked
// to, routing by key, and retries through failovers. Private to client/.
//
// Threads: operations start on the caller's thread and complete on engine threads; whatever
// may block (reading the map, connecting to a node, backing off) runs on the router's own
// thread, never on an engine thread. Embedded in a simulation (ClientHooks::embedding),
// that thread is one of the world's (ClientEmbedding::spawn) and time is the world's clock.
//
// Retries (bounded by ClientOptions::failover_timeout, backoff 20 ms doubling to 500 ms): an
// ABORTED answer (not the primary; nothing applied), a node that cannot be reached before the
// request was sent, a write that failed before its PUT left the client (waiting for a slot
// grant: client/not_sent.h), and, for reads, any UNAVAILABLE or DEADLINE_EXCEEDED. A write
// whose PUT was sent and then lost its answer fails with UNKNOWN ("outcome unknown").
#ifndef UNLOADKV_CLIENT_CLUSTER_ROUTER_H_
#define UNLOADKV_CLIENT_CLUSTER_ROUTER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "client/client.h"
#include "client/client_impl.h"
#include "transport/base/clock.h"
#include "transport/cluster/cluster_map.h"

namespace unloadkv {

class ClusterRouter : public Client {
 public:
  using PutDone = std::function<void(absl::StatusOr<uint64_t>)>;
  static absl::StatusOr<std::unique_ptr<ClusterRouter>> Connect(const ClientOptions& options,
                                                                const ClientHooks& hooks);
  ~ClusterRouter() override;

  absl::Status Put(absl::string_view key, absl::string_view value) override {
    return Store(key, value, /*merge=*/false);
  }
  absl::Status MergeFields(absl::string_view key, absl::string_view fields) override {
    return Store(key, fields, /*merge=*/true);
  }
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::Status Delete(absl::string_view key) override;
  absl::StatusOr<ScanPage> Scan(absl::string_view start, absl::string_view end,
                                uint32_t limit) override;
  absl::StatusOr<ServerStats> Stats() override;
  void PutAsync(absl::string_view key, absl::string_view value, PutDone done) override {
    StoreAsync(key, value, std::move(done), /*merge=*/false);
  }
  void MergeFieldsAsync(absl::string_view key, absl::string_view fields, PutDone done) override {
    StoreAsync(key, fields, std::move(done), /*merge=*/true);
  }
  void GetAsync(absl::string_view key,
                std::function<void(absl::StatusOr<std::string>)> done) override;
  void DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) override;
  // Requests go to several connections: nothing to batch.
  Batch BeginBatch() override { return Batch(); }

  void Wait(const std::function<bool()>& done) override;
  int in_flight() const override { return in_flight_.load(); }
  bool connected() const override;
  WriteStats write_stats() const override;
  const std::string& staging_memory() const override;

 private:
  absl::Status Store(absl::string_view key, absl::string_view value, bool merge);
  void StoreAsync(absl::string_view key, absl::string_view value, PutDone done, bool merge);
  // One operation's attempt: given a connection to the shard's primary and the shard id,
  // issues it; the callback says how it ended.
  enum class Outcome { kDone, kRetry };
  struct Op;

  ClusterRouter() = default;
  // The routing decision for `key`: its shard and the primary's connection (connecting if
  // needed; may block: router thread or Connect only). Nullptr with the reason when there is
  // none yet.
  std::shared_ptr<NodeClient> ConnectionFor(absl::string_view key, uint32_t* shard,
                                            absl::Status* why);
  // Same without blocking: nullptr when the connection is not open yet.
  std::shared_ptr<NodeClient> OpenConnectionFor(absl::string_view key, uint32_t* shard);
  absl::Status Refresh();  // re-reads the map (blocks)
  void Start(std::shared_ptr<Op> op);
  void Attempt(std::shared_ptr<Op> op, bool may_block);
  void Retry(std::shared_ptr<Op> op, absl::Status why);
  void Background();
  // The next task for Background, or null once stopping (background_done_ then holds).
  std::function<void(bool)> NextTask();
  // Runs `task(false)` on the router's thread, or `task(true)` (fail, do not block) when the
  // router is closing.
  void Post(std::function<void(bool closing)> task);
  void Finished();
  template <typename T, typename Start>
  T Await(Start start);
  // Embedded only: blocks until `done()` holds while the world runs.
  void Block(const std::function<bool()>& done);
  void SleepUntil(absl::Time due);

  ClientOptions options_;                       // for each node's connection
  ClientHooks node_hooks_;                      // for each node's connection: no cluster map
  const ClientEmbedding* embedding_ = nullptr;  // node_hooks_.embedding
  const Clock* clock_ = nullptr;
  std::unique_ptr<cluster::ClusterMap> owned_map_;
  cluster::ClusterMap* map_ = nullptr;
  std::unique_ptr<cluster::MapWatch> watch_;

  mutable std::mutex mu_;
  cluster::ClusterView view_;                                 // guarded by mu_
  std::map<std::string, std::shared_ptr<NodeClient>> conns_;  // by node; guarded by mu_
  WriteStats retired_;  // write stats of closed connections; guarded by mu_
  std::atomic<bool> stale_{false};

  std::mutex tasks_mu_;
  std::condition_variable tasks_cv_;
  std::deque<std::function<void(bool)>> tasks_;  // guarded by tasks_mu_
  bool stop_ = false;                            // guarded by tasks_mu_
  bool background_done_ = false;                 // guarded by tasks_mu_ (embedded)
  std::thread thread_;                           // not embedded

  std::atomic<int> in_flight_{0};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  uint64_t completions_ = 0;  // guarded by done_mu_
};

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_CLUSTER_ROUTER_H_
