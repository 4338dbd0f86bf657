// kvserver's own Prometheus metrics, next to the engine's (transport/engine/prometheus_metrics.h)
// in one registry:
//   unloadkv_rpc_requests_total{method,code}     requests answered, by canonical code name
//   unloadkv_rpc_latency_seconds{method}         histogram, arrival to reply
//   unloadkv_value_writes_total{path}            values PUTs published, by the path the client
//                                                posted them on (offload|unload|unknown), or
//                                                inline (in the PUT itself, no value write)
//   unloadkv_arena_used_bytes, unloadkv_arena_free_bytes, unloadkv_keys, unloadkv_connections
//   unloadkv_connections_accepted_total          connections that completed admission
//   unloadkv_connections_refused_total{reason}   admission attempts given up on, by reason:
//       hello (malformed line or info), auth (authentication failed), hello_timeout,
//       hello_evicted, hello_closed, address (info names another host), limit
//       (max_connections), host_limit (max_connections_per_host), half_open_evicted,
//       handshake_timeout, handshake_failed, accept_failed (out of descriptors), error
//       (resources)
//   unloadkv_requests_denied_total{method,reason}  requests refused PERMISSION_DENIED for who
//       sent them: role (the user's role lacks the method), not_primary (a node request from a
//       node the map does not name the shard's primary at that epoch), not_placed (the map
//       does not place the shard on this node), no_cluster (a node request to a single node)
//   unloadkv_connections_closed_idle_total       client connections closed by --idle_timeout_s
//   unloadkv_grants_refused_total{reason}        GRANT requests refused RESOURCE_EXHAUSTED:
//       connection_quota (--max_grant_bytes_per_connection)
//   unloadkv_bootstrap_pending                   sockets whose hello line is incomplete
//   unloadkv_connections_half_open               admitted, no message from the client yet
// With --data_dir, the shard logs' series next to these: server/log_metrics.h.
#ifndef UNLOADKV_SERVER_SERVER_METRICS_H_
#define UNLOADKV_SERVER_SERVER_METRICS_H_

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "proto/kv.pb.h"

namespace unloadkv::server {

// Thread-safe.
class ServerMetrics {
 public:
  static constexpr int kMethods = proto::Method_ARRAYSIZE;

  explicit ServerMetrics(std::shared_ptr<prometheus::Registry> registry);

  void OnRpc(proto::Method method, const absl::Status& status, absl::Duration latency);
  void OnValueWrite(proto::WritePath path);
  void SetArena(uint64_t used_bytes, uint64_t free_bytes);
  void SetKeys(uint64_t keys);
  void SetConnections(uint64_t n);
  void OnConnectionAccepted();
  void OnConnectionRefused(absl::string_view reason, uint64_t n = 1);
  void SetAdmission(uint64_t pending_hellos, uint64_t half_open);
  void OnDenied(proto::Method method, absl::string_view reason);
  void OnIdleClosed();
  void OnGrantRefused(absl::string_view reason);

 private:
  static constexpr int kCodes = 17;  // absl::StatusCode values 0..16
  prometheus::Family<prometheus::Counter>* requests_;
  // requests_'s series by (method, code), added on first use: Family::Add hashes the labels
  // under a lock, which the request path need not pay every time.
  std::atomic<prometheus::Counter*> request_counters_[kMethods][kCodes] = {};
  prometheus::Histogram* latency_[kMethods];
  prometheus::Counter* value_writes_[4];  // by proto::WritePath
  prometheus::Gauge* arena_used_;
  prometheus::Gauge* arena_free_;
  prometheus::Gauge* keys_;
  prometheus::Gauge* connections_;
  prometheus::Counter* accepted_;
  prometheus::Family<prometheus::Counter>* refused_;
  prometheus::Family<prometheus::Counter>* denied_;
  prometheus::Counter* idle_closed_;
  prometheus::Family<prometheus::Counter>* grants_refused_;
  prometheus::Gauge* pending_hellos_;
  prometheus::Gauge* half_open_;
};

}  // namespace unloadkv::server

#endif  // UNLOADKV_SERVER_SERVER_METRICS_H_
