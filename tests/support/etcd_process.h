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
  // Starts etcd and waits (at most 20 s) until it answers /health. FAILED_PRECONDITION when
  // etcd is not installed (the message says how to install it).
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start();
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

 private:
  EtcdProcess() = default;
  absl::Status Launch();

  std::string dir_;
  std::string endpoint_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_SUPPORT_ETCD_PROCESS_H_
