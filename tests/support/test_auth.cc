#include "tests/support/test_auth.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/handshake.h"

namespace unloadkv::testing {

std::string WriteTestAuthFile(const std::vector<std::string>& nodes, const std::string& file) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", file);
  std::string text = absl::StrCat("# written by the test\n", kTestClientUser, " client ",
                                  rpc::NewNonce(), rpc::NewNonce(), "\n", kTestAdminUser, " admin ",
                                  rpc::NewNonce(), rpc::NewNonce(), "\n");
  for (const std::string& n : nodes) {
    absl::StrAppend(&text, n, " node ", rpc::NewNonce(), rpc::NewNonce(), "\n");
  }
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    std::fprintf(stderr, "cannot write the test auth file %s\n", path.c_str());
    std::abort();
  }
  close(fd);
  return path;
}

std::string SecretOf(const std::string& path, const std::string& user) {
  absl::StatusOr<rpc::AuthTable> t = rpc::AuthTable::Load(path);
  if (!t.ok()) return "";
  const rpc::AuthUser* u = t->Find(user);
  return u != nullptr ? u->secret : "";
}

}  // namespace unloadkv::testing
