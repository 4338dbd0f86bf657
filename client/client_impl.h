// NodeClient: the Client of one kvserver (a single node, or one node of a cluster, for the
// ClusterRouter). Private to client/; users include client.h only. Thread-safety as Client's.
#ifndef UNLOADKV_CLIENT_CLIENT_IMPL_H_
#define UNLOADKV_CLIENT_CLIENT_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "client/client.h"
#include "client/client_hooks.h"
#include "client/grant_pool.h"
#include "client/sync_call.h"
#include "client/value_buffers.h"
#include "client/write_count.h"
#include "google/protobuf/message.h"
#include "transport/base/mutex.h"
#include "transport/base/ring_queue.h"
#include "transport/engine/engine.h"
#include "transport/rnic/device.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/rpc.h"

namespace unloadkv {

// The credentials to prove (`embedding`'s, else the options' auth_file and user); none without
// an auth file. Errors name the file and what is wrong with it.
absl::StatusOr<std::optional<rpc::Credentials>> LoadCredentials(const ClientOptions& options,
                                                                const ClientEmbedding* embedding);

class NodeClient : public Client {
 public:
  using Reply = std::function<void(absl::StatusOr<std::string>)>;
  using PutDone = std::function<void(absl::StatusOr<uint64_t>)>;
  using GetDone = std::function<void(absl::StatusOr<std::string>)>;

  // Opens the device and engine, exchanges connection details with the server and completes
  // one PING round trip, all within options.timeout (client_impl.cc).
  static absl::StatusOr<std::unique_ptr<NodeClient>> Connect(const ClientOptions& options,
                                                             const ClientHooks& hooks);
  ~NodeClient() override;

  // Operations (client_ops.cc).
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
    StoreAsync(key, value, std::move(done), /*shard=*/0, /*merge=*/false);
  }
  void MergeFieldsAsync(absl::string_view key, absl::string_view fields, PutDone done) override {
    StoreAsync(key, fields, std::move(done), /*shard=*/0, /*merge=*/true);
  }
  void GetAsync(absl::string_view key,
                std::function<void(absl::StatusOr<std::string>)> done) override;
  void DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) override;
  Batch BeginBatch() override;

  // Waiting and state (client_impl.cc).
  void Wait(const std::function<bool()>& done) override;
  int in_flight() const override { return rpc_->in_flight(); }
  bool connected() const override { return !conn_->failed(); }
  WriteStats write_stats() const override { return write_count_->stats(); }
  const std::string& staging_memory() const override { return engine_->staging_memory(); }

  // A Put (or, with `merge`, a MergeFields) of a key of shard `shard` (a cluster's: grants
  // come from its arena; 0 on a single node).
  absl::Status Store(absl::string_view key, absl::string_view value, bool merge);
  void StoreAsync(absl::string_view key, absl::string_view value, PutDone done, uint32_t shard,
                  bool merge);

 private:
  NodeClient() = default;
  // Starts a request with a callback and returns its result once Wait saw it.
  template <typename T, typename Start>
  T Await(Start start);
  // Wakes threads in Wait: something completed, or the driver let go.
  void Signal();
  // The embedded client's poller (ClientEmbedding::add_poller).
  int PollEmbedded();
  // Sends one request; `done` runs exactly once if this returns OK, never otherwise.
  absl::Status Call(proto::Method method, const google::protobuf::Message& req, Reply done,
                    const engine::SendOptions& send = {});
  // One PING round trip, without retries.
  absl::Status Ping(absl::Duration timeout);
  absl::Status ConnectionError() const;
  // Connect's first step: the embedding's device and clock (checked), or a device of its own
  // opened for options_.
  absl::Status UseDevice();

  // The PUT path (client_ops.cc): a grant, the value write, the PUT.
  client_internal::GrantPool& GrantsOf(uint32_t shard);
  void WithGrant(uint32_t shard, uint32_t size, client_internal::GrantPool::Use use);
  void RequestGrants(uint32_t shard, int size_class);
  void WriteAndPut(uint32_t shard, absl::string_view key, absl::string_view value,
                   const proto::SlotGrant& g, bool merge, PutDone done);
  // A PUT in flight: what its value write's completion and its answer share. Recycled
  // (TakePutState, UnrefPutState), so that their callbacks capture two pointers and a PUT
  // allocates no closure state (docs/benchmarks.md, "The data path's rules").
  struct PutState {
    PutDone done;
    std::optional<uint32_t> buffer;     // the value's buffer, freed once (ReleaseValue)
    std::atomic<bool> released{false};  // the buffer was freed
    std::atomic<int> refs{0};           // callbacks still to run (the write's, the answer's)
  };
  PutState* TakePutState(PutDone done, int refs);
  // Drops one reference; the last one recycles the state.
  void UnrefPutState(PutState* ps);
  // Frees the value's buffer the first time it is called (the write completed, or the server
  // answered the PUT behind it).
  void ReleaseValue(PutState* ps);
  // A PUT (a merge, with `merge`) that carries its value (the policy's ",inline:N",
  // client/value_policy.h): no grant, no value write.
  void PutInline(uint32_t shard, absl::string_view key, absl::string_view value, bool merge,
                 PutDone done);
  // Sends the inline PUTs that wait for room (oldest first) while the connection has room for
  // another call; one thread at a time. Runs after every answer and wherever a PUT was queued.
  void SendWaitingInline();
  // Sends the PUT `req`; its answer frees `ps`'s buffer (if any), drops a reference and runs
  // `ps->done`. An error: nothing was sent and the answer's callback will not run.
  absl::Status CallPut(const proto::PutRequest& req, PutState* ps, const engine::SendOptions& send);

  ClientOptions options_;
  uint32_t inline_put_bytes_ = 0;  // client_internal::InlineBytesOn (client/value_policy.h)
  ClientHooks hooks_;
  const Clock* clock_ = RealClock::Get();
  std::unique_ptr<rnic::Device> owned_device_;
  rnic::Device* device_ = nullptr;                         // owned_device_, or the embedding's
  std::optional<uint64_t> poller_;                         // embedded: our poller's handle
  absl::Time next_deadline_check_ = absl::InfinitePast();  // embedded: poller's thread only
  std::unique_ptr<client_internal::WriteCount> write_count_;
  // PUT states not in use. Declared before the engine and the RPC client: callbacks holding
  // states in use run while those are destroyed.
  Mutex put_states_mu_;
  std::vector<std::unique_ptr<PutState>> put_states_ ABSL_GUARDED_BY(put_states_mu_);
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<client_internal::ValueBuffers> buffers_;
  // One pool per shard whose slots this connection was granted (one on a single node).
  Mutex grants_mu_;
  std::map<uint32_t, std::unique_ptr<client_internal::GrantPool>> grants_
      ABSL_GUARDED_BY(grants_mu_);
  std::shared_ptr<engine::Connection> conn_;
  std::unique_ptr<rpc::RpcClient> rpc_;
  // Inline PUTs that found max_in_flight calls outstanding (and those behind them, so that a
  // connection's inline PUTs go out in issue order), with copies of their key and value: an
  // inline PUT waits for room as a granted one waits for its grant. Failed (not sent) when the
  // client is destroyed.
  struct WaitingInline {
    uint32_t shard = 0;
    std::string key, value;
    bool merge = false;
    PutDone done;
  };
  Mutex waiting_mu_;
  RingQueue<WaitingInline> waiting_inline_ ABSL_GUARDED_BY(waiting_mu_);
  // waiting_inline_.size() plus the one SendWaitingInline is sending, read without the lock.
  std::atomic<size_t> waiting_count_{0};
  std::atomic<bool> sending_waiting_{false};  // a thread is in SendWaitingInline

  // caller_progress: the thread holding drive_mu_ drives; the others sleep on progress_cv_
  // until it made progress.
  std::mutex drive_mu_;
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  uint64_t progress_epoch_ = 0;  // guarded by progress_mu_

  std::atomic<bool> stop_{false};
  // Its check on the process's DeadlineTicker (fails requests whose deadline passed, or all
  // once the connection failed); 0 for an embedded client, checked by PollEmbedded instead.
  uint64_t ticker_id_ = 0;
};

template <typename T, typename Start>
T NodeClient::Await(Start start) {
  client_internal::Pending<T> s;
  start([&s](T r) {
    std::lock_guard<std::mutex> l(s.mu);
    s.result.emplace(std::move(r));
    s.done.store(true, std::memory_order_release);
    s.cv.notify_one();
  });
  if (options_.caller_progress || hooks_.embedding != nullptr) {
    Wait([&s] { return s.done.load(std::memory_order_acquire); });
  } else {
    // The engine thread runs the callback, which wakes this caller alone: threads sharing the
    // client do not wake each other.
    std::unique_lock<std::mutex> l(s.mu);
    s.cv.wait(l, [&s] { return s.done.load(std::memory_order_relaxed); });
  }
  std::lock_guard<std::mutex> l(s.mu);  // the callback has left its critical section
  return std::move(*s.result);
}

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_CLIENT_IMPL_H_
