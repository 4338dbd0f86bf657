// Certificates for TLS tests, made by the `openssl` command (Debian's openssl package) in a
// directory of the test's: a CA, a server certificate for 127.0.0.1 and a client certificate,
// each key mode 600. Nothing is downloaded and nothing outlives the test's directory.
#ifndef UNLOADKV_TESTS_SUPPORT_TEST_PKI_H_
#define UNLOADKV_TESTS_SUPPORT_TEST_PKI_H_

#include <string>

#include "absl/status/statusor.h"

namespace unloadkv::testing {

struct TestPki {
  std::string ca_cert, ca_key;
  std::string server_cert, server_key;  // subjectAltName IP:127.0.0.1
  std::string client_cert, client_key;  // no CommonName (etcd's gateway demands it)
};

// Makes the files under `dir` (created if absent). FAILED_PRECONDITION naming the package
// when openssl is not installed; INTERNAL with openssl's output when a step fails.
absl::StatusOr<TestPki> MakeTestPki(const std::string& dir);

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_SUPPORT_TEST_PKI_H_
