// A small HTTP endpoint for a node's observability: a Prometheus registry at /metrics (text
// format) and whatever pages its owner adds (kvserver's /status). Served by civetweb
// (prometheus-cpp's). Knows nothing of the engine or the server: they hand it a registry and
// page functions.
#ifndef UNLOADKV_TRANSPORT_HTTP_METRICS_ENDPOINT_H_
#define UNLOADKV_TRANSPORT_HTTP_METRICS_ENDPOINT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "prometheus/registry.h"

class CivetServer;

namespace unloadkv::http {

// The node's HTTP endpoint: `registry` at http://<address>/metrics (Prometheus text format),
// and pages added with Handle. `address` is "host:port" (port 0 picks a free one). A busy port
// or bad address is an error, not an exception.
//
// Idle or slow connections cannot block scrapes for long: kThreads connections are served at
// once, and one that has not sent a complete request within kRequestTimeout is closed.
class MetricsEndpoint {
 public:
  static constexpr int kThreads = 64;
  static constexpr absl::Duration kRequestTimeout = absl::Seconds(1);

  struct Page {
    std::string content_type;
    std::string body;
  };
  // Called on the endpoint's threads, concurrently: must be thread-safe.
  using PageFunction = std::function<Page()>;

  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& address, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsEndpoint();

  // Serves GET `path` (exactly: "/status" does not serve "/status/x") from `page`. The function
  // must stay callable until the endpoint is destroyed.
  void Handle(const std::string& path, PageFunction page);

  // "http://host:port/metrics".
  const std::string& url() const { return url_; }
  // "http://host:port".
  const std::string& base_url() const { return base_url_; }
  // "host:port", the port it listens on (the one picked, for port 0).
  const std::string& host_port() const { return host_port_; }

 private:
  class Handler;
  MetricsEndpoint() = default;
  std::unique_ptr<CivetServer> server_;
  std::vector<std::unique_ptr<Handler>> handlers_;  // outlive server_'s use of them
  std::string url_, base_url_, host_port_;
};

}  // namespace unloadkv::http

#endif  // UNLOADKV_TRANSPORT_HTTP_METRICS_ENDPOINT_H_
