// A real etcd (Debian's etcd-server 3.4) for tests: one member on loopback, free ports, a data
// directory under the test's temporary directory, fast elections so that 1 s leases are
// honored. The child dies with the test process (PR_SET_PDEATHSIG), so no path leaves it
// running.
#ifndef UNLOADKV_TESTS_SUPPORT_ETCD_PROCESS_H_
#define UNLOADKV_TESTS_SUPPORT_ETCD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace unloadkv::testing {

// Where Debian installs etcd; empty when it is not installed.
std::string EtcdBinary();

class EtcdProcess {
 public:
  // TLS: with cert_file, etcd serves https with that certificate (and key_file) and accepts
  // only clients that present a certificate ca_file signed (--client-cert-auth); the test's
  // own calls (health, Post) present client_cert_file and client_key_file.
  struct Options {
    std::string ca_file, cert_file, key_file;
    std::string client_cert_file, client_key_file;
  };
  // Starts etcd and waits (at most 20 s) until it answers /health. FAILED_PRECONDITION when
  // etcd is not installed (the message says how to install it).
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(const Options& options = Options());
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "127.0.0.1:PORT" of the client (and JSON gateway) port.
  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  // SIGTERM and reap. Idempotent.
  void Stop();
  // Starts it again on the same ports and data (the map survives) and waits until healthy.
  absl::Status Restart();
  // The tail of etcd's log, for failure messages.
  std::string LogTail() const;
  // POSTs `json` to the JSON gateway's `path` ("/v3/auth/user/add") with auth token `token`
  // (may be empty); the answer's body, or the HTTP or transport failure. For setting etcd up.
  absl::StatusOr<std::string> Post(const std::string& path, const std::string& json,
                                   const std::string& token = "") const;
  // Turns on etcd's authentication with a root user (password `root_password`) and one user
  // `user` (password `password`) whose role may read and write keys under `prefix` only.
  // Returns root's token for later Post calls.
  absl::StatusOr<std::string> EnableAuth(const std::string& root_password, const std::string& user,
                                         const std::string& password, const std::string& prefix);

 private:
  EtcdProcess() = default;
  absl::Status Launch();

  std::string Url(absl::string_view path) const;

  Options options_;
  std::string dir_;
  std::string endpoint_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_SUPPORT_ETCD_PROCESS_H_
