// Auth files for tests: every cluster and security test runs with authentication on, the way
// an operator runs a cluster (docs/security.md).
#ifndef UNLOADKV_TESTS_SUPPORT_TEST_AUTH_H_
#define UNLOADKV_TESTS_SUPPORT_TEST_AUTH_H_

#include <string>
#include <vector>

namespace unloadkv::testing {

// The users WriteTestAuthFile writes besides the nodes.
inline constexpr char kTestClientUser[] = "app";  // role client
inline constexpr char kTestAdminUser[] = "ops";   // role admin

// Writes an auth file (mode 600) under the test's temporary directory (TEST_TMPDIR, else
// /tmp) named `file`: users "app" (client), "ops" (admin) and one node user per name in
// `nodes`, each with a fresh random secret (OpenSSL's CSPRNG). Returns its path; aborts the
// test process if it cannot be written.
std::string WriteTestAuthFile(const std::vector<std::string>& nodes,
                              const std::string& file = "auth");

// The secret of `user` in the auth file at `path` ("" when absent).
std::string SecretOf(const std::string& path, const std::string& user);

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_SUPPORT_TEST_AUTH_H_
