// A client of etcd's v3 JSON gateway (etcd 3.4 serves it at /v3/... on its client port):
// unary calls and line-delimited streams over HTTP/1.1 with libcurl, request and response
// bodies as protobuf JSON of etcd_gateway.proto.
//
// Why the JSON gateway and not gRPC: Debian 12's etcd-server 3.4 serves it on the same port,
// libcurl and libprotobuf (whose JSON mapping matches the gateway's) are already on every
// build machine, and a control plane that makes a few calls a second gains nothing from
// gRPC's machinery (docs/cluster.md).
//
// Security (docs/security.md): with EtcdSecurity::ca_file the gateway speaks HTTPS, verifying
// etcd's certificate against that CA and presenting a client certificate if one is given;
// with EtcdSecurity::user it authenticates to etcd's auth API (the password read from a
// file, never a flag) and sends the token etcd returns with every request, authenticating
// again when etcd says the token is no longer valid.
//
// Thread-safety: every method may be called from any thread; calls are independent (each uses
// its own connection) and block for at most the timeout given at creation.
#ifndef UNLOADKV_TRANSPORT_CLUSTER_ETCD_GATEWAY_H_
#define UNLOADKV_TRANSPORT_CLUSTER_ETCD_GATEWAY_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"

namespace unloadkv::cluster {

// How to reach etcd: files named by kvserver's and kvclient's --etcd_ca, --etcd_cert,
// --etcd_key, --etcd_user and --etcd_password_file. All empty: plain HTTP, no user.
struct EtcdSecurity {
  std::string ca_file;    // PEM CA certificate that signed etcd's; set: HTTPS
  std::string cert_file;  // PEM client certificate (etcd --client-cert-auth), with key_file
  std::string key_file;
  std::string user;           // etcd user (etcd auth enabled), with password_file
  std::string password_file;  // a file holding the password (mode o-rwx)
};

class EtcdGateway {
 public:
  // `endpoints`: "HOST:PORT" or a comma-separated list; calls go to the first that answers.
  // INVALID_ARGUMENT for a malformed list or inconsistent security flags (a certificate
  // without its key, a user without a password file, a client certificate without a CA);
  // the files' own errors (missing, unreadable, a password file others may read) name them.
  static absl::StatusOr<std::unique_ptr<EtcdGateway>> Create(
      absl::string_view endpoints, absl::Duration timeout,
      const EtcdSecurity& security = EtcdSecurity());

  // "127.0.0.1:2379" or "a:2379,b:2379", for messages.
  const std::string& endpoints() const { return endpoints_text_; }
  // "https" or "http".
  const char* scheme() const { return security_.ca_file.empty() ? "http" : "https"; }

  // POSTs `request` to `path` ("/v3/kv/range") and parses the answer into `response`.
  // UNAVAILABLE (naming the endpoints) when no endpoint answers within the timeout; etcd's own
  // errors keep their gRPC code and message.
  absl::Status Call(absl::string_view path, const google::protobuf::Message& request,
                    google::protobuf::Message* response);

  // POSTs `request` to a streaming `path` ("/v3/watch") and calls `on_line` with every line
  // of the answer, until the stream ends, `on_line` returns false, or *stop becomes true
  // (checked at least every 100 ms). No overall timeout: the stream lives as long as etcd
  // keeps it. Returns OK when stopped by the caller, else why the stream ended.
  absl::Status Stream(absl::string_view path, const google::protobuf::Message& request,
                      const std::function<bool(absl::string_view line)>& on_line,
                      const std::atomic<bool>* stop);

 private:
  EtcdGateway(std::vector<std::string> endpoints, std::string text, absl::Duration timeout,
              EtcdSecurity security, std::string password)
      : endpoints_(std::move(endpoints)),
        endpoints_text_(std::move(text)),
        timeout_(timeout),
        security_(std::move(security)),
        password_(std::move(password)) {}
  // One POST to the endpoints in turn, with the token `token` (may be empty).
  absl::Status CallOnce(absl::string_view path, const std::string& body, const std::string& token,
                        google::protobuf::Message* response);
  // The auth token to send ("" without a user), authenticating first when there is none.
  absl::StatusOr<std::string> Token();
  void ForgetToken(const std::string& stale);

  const std::vector<std::string> endpoints_;
  const std::string endpoints_text_;
  const absl::Duration timeout_;
  const EtcdSecurity security_;
  const std::string password_;
  std::atomic<size_t> preferred_{0};  // index of the endpoint that answered last
  std::mutex token_mu_;
  std::string token_;  // guarded by token_mu_
};

// Protobuf JSON with etcd's field names; parse ignores fields we do not declare.
std::string ToGatewayJson(const google::protobuf::Message& m);
absl::Status FromGatewayJson(absl::string_view json, google::protobuf::Message* m);

}  // namespace unloadkv::cluster

#endif  // UNLOADKV_TRANSPORT_CLUSTER_ETCD_GATEWAY_H_
