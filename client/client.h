// unloadkv::Client, the C++ SDK: one connection to a kvserver, synchronous and asynchronous
// Get/Put/Delete/Scan.
//
//   unloadkv::ClientOptions o;
//   o.server = "127.0.0.1:7070";
//   auto client = unloadkv::Client::Connect(o);          // absl::StatusOr
//   absl::Status st = (*client)->Put("user:1", "alice");
//   absl::StatusOr<std::string> v = (*client)->Get("user:1");
//
// A Put writes the value straight into a server arena slot through the offload/unload write
// engine (the connection's path policy picks the path), then sends the PUT naming the slot;
// the server publishes it only then, so a value is never visible half-written.
//
// Errors: InvalidArgument (limits of proto/kv.proto), NotFound, ResourceExhausted (more than
// max_in_flight requests, or the server's arena is full), DeadlineExceeded, Unavailable
// (connection lost or server shutting down). Synchronous calls retry transient failures
// (local push-back; timeouts of reads) up to max_retries times with exponential backoff.
//
// Thread-safety: all methods may be called from any thread. Async callbacks run exactly once,
// on the client's engine thread (or on the caller's thread when the request fails before it
// is sent); they must not block and must not call synchronous methods.
#ifndef UNLOADKV_CLIENT_CLIENT_H_
#define UNLOADKV_CLIENT_CLIENT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/kv.pb.h"
#include "transport/base/mapped_memory.h"
#include "transport/base/mutex.h"
#include "transport/engine/engine.h"
#include "transport/engine/metrics.h"
#include "transport/rnic/device.h"
#include "transport/rpc/rpc.h"

namespace unloadkv {

struct ClientOptions {
  std::string server = "127.0.0.1:7070";  // kvserver's --listen address
  std::string transport = "soft";         // soft | verbs; must match the server
  std::string soft_host = "127.0.0.1";    // soft: the address the server reaches this client on
  std::string verbs_device;
  std::string policy =
      "adaptive";          // path policy of value writes: offload, unload, adaptive, split:F
  int max_in_flight = 64;  // requests outstanding on the connection (1..1024)
  absl::Duration timeout = absl::Seconds(5);  // per request
  int max_retries = 3;
  // Optional extra sink for the engine's metrics (e.g. Prometheus); must outlive the Client.
  engine::EngineMetrics* metrics = nullptr;
  // Who drives the connection. false: an engine thread, so async callbacks run whenever
  // answers arrive. true: the threads blocked in synchronous calls (or in Wait) drive it
  // themselves, one at a time, which saves waking a second thread per request; async
  // callbacks then run only while some thread is inside a synchronous call or Wait.
  bool caller_progress = false;
};

struct ScanPage {
  std::vector<std::pair<std::string, std::string>> items;
  bool more = false;  // call again from the last key + "\0" for the rest
};

// Value writes this client made, by the path they took (complete, from engine callbacks).
struct WriteStats {
  uint64_t offload = 0;
  uint64_t unload = 0;
  uint64_t errors = 0;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();

  absl::Status Put(absl::string_view key, absl::string_view value);
  absl::StatusOr<std::string> Get(absl::string_view key);
  absl::Status Delete(absl::string_view key);
  absl::StatusOr<ScanPage> Scan(absl::string_view start, absl::string_view end, uint32_t limit);
  absl::StatusOr<proto::StatsResponse> Stats();

  // Asynchronous forms; no retries. Put yields the new version.
  void PutAsync(absl::string_view key, absl::string_view value,
                std::function<void(absl::StatusOr<uint64_t>)> done);
  void GetAsync(absl::string_view key, std::function<void(absl::StatusOr<std::string>)> done);
  void DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done);

  // Returns once `done()` is true, driving the connection meanwhile when caller_progress is
  // set (else waiting for the engine thread). `done` is called with no lock held, from this
  // thread only. For waiting on async requests; never call it from a callback.
  void Wait(const std::function<bool()>& done);

  int in_flight() const { return rpc_->in_flight(); }
  bool connected() const { return !conn_->failed(); }
  WriteStats write_stats() const;
  const std::string& staging_memory() const { return engine_->staging_memory(); }

 private:
  struct Grants;     // per size class: pooled grants and Puts waiting for one
  class WriteCount;  // engine metrics: counts, then forwards to options.metrics

  using Reply = std::function<void(absl::StatusOr<std::string>)>;
  using PutDone = std::function<void(absl::StatusOr<uint64_t>)>;
  using GrantUse = std::function<void(absl::StatusOr<proto::SlotGrant>)>;

  Client() = default;
  // Starts a request with a callback and returns its result once Wait saw it.
  template <typename T, typename Start>
  T Await(Start start);
  // Wakes threads in Wait: something completed, or the driver let go.
  void Signal();
  // Sends one request; `done` runs exactly once if this returns OK, never otherwise.
  absl::Status Call(proto::Method method, const google::protobuf::Message& req, Reply done);
  // Calls `use` with a grant able to hold `size` bytes, fetching more when the pool is empty.
  void WithGrant(uint32_t size, GrantUse use);
  void RequestGrants(int size_class);
  void ReturnGrant(const proto::SlotGrant& g);
  // Writes the value into the granted slot through the engine, then sends the PUT.
  void WriteAndPut(const std::string& key, const std::string& value, const proto::SlotGrant& g,
                   PutDone done);
  absl::Status ConnectionError() const;
  // One PING round trip, without retries.
  absl::Status Ping(absl::Duration timeout);

  ClientOptions options_;
  std::unique_ptr<rnic::Device> device_;
  std::unique_ptr<WriteCount> write_count_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<MappedMemory> buffers_;  // max_in_flight value buffers, registered
  std::unique_ptr<rnic::MemoryRegion> buffers_mr_;
  std::shared_ptr<engine::Connection> conn_;
  std::unique_ptr<rpc::RpcClient> rpc_;

  mutable Mutex mu_;
  std::vector<uint32_t> free_buffers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Grants>> grants_ ABSL_GUARDED_BY(mu_);  // by size class

  // caller_progress: the thread holding drive_mu_ drives; the others sleep on progress_cv_
  // until it made progress.
  std::mutex drive_mu_;
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  uint64_t progress_epoch_ = 0;  // guarded by progress_mu_

  std::atomic<bool> stop_{false};
  std::thread ticker_;  // fails requests whose deadline passed
};

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_CLIENT_H_
