#include "tests/support/test_pki.h"

#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/subprocess.h"

namespace unloadkv::testing {
namespace {

constexpr char kOpenssl[] = "/usr/bin/openssl";

absl::Status Run(std::vector<std::string> args) {
  args.insert(args.begin(), kOpenssl);
  Child c = Spawn(args, /*capture_stderr=*/true, /*alarm_seconds=*/60);
  if (c.pid < 0) return absl::InternalError("cannot start openssl");
  const std::string out = ReadAll(c.out_fd);
  const std::string err = ReadAll(c.err_fd);
  close(c.out_fd);
  close(c.err_fd);
  if (int code = WaitExit(c.pid); code != 0) {
    return absl::InternalError(absl::StrCat("openssl ", args[1], " exited ", code, ": ", err, out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestPki> MakeTestPki(const std::string& dir) {
  if (access(kOpenssl, X_OK) != 0) {
    return absl::FailedPreconditionError(
        "openssl is not installed (apt-get install openssl; ./quickstart.sh test installs it)");
  }
  mkdir(dir.c_str(), 0700);
  TestPki p;
  auto file = [&](const char* name) { return absl::StrCat(dir, "/", name); };
  p.ca_cert = file("ca.crt");
  p.ca_key = file("ca.key");
  p.server_cert = file("server.crt");
  p.server_key = file("server.key");
  p.client_cert = file("client.crt");
  p.client_key = file("client.key");
  const std::vector<std::vector<std::string>> steps = {
      {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p.ca_key, "-out", p.ca_cert,
       "-days", "2", "-subj", "/CN=unloadkv-test-ca"},
      {"req", "-newkey", "rsa:2048", "-nodes", "-keyout", p.server_key, "-out", file("server.csr"),
       "-subj", "/CN=etcd", "-addext", "subjectAltName=IP:127.0.0.1"},
      {"x509", "-req", "-in", file("server.csr"), "-CA", p.ca_cert, "-CAkey", p.ca_key,
       "-CAcreateserial", "-out", p.server_cert, "-days", "2", "-copy_extensions", "copy"},
      // No CommonName: with client-cert-auth and users both on, etcd's JSON gateway refuses a
      // client certificate that has one (it cannot map it to a user across the gateway; etcd
      // embed/serve.go); the user comes from the password instead.
      {"req", "-newkey", "rsa:2048", "-nodes", "-keyout", p.client_key, "-out", file("client.csr"),
       "-subj", "/O=unloadkv-client"},
      {"x509", "-req", "-in", file("client.csr"), "-CA", p.ca_cert, "-CAkey", p.ca_key,
       "-CAcreateserial", "-out", p.client_cert, "-days", "2"},
  };
  for (const auto& step : steps) {
    if (absl::Status st = Run(step); !st.ok()) return st;
  }
  for (const std::string* key : {&p.ca_key, &p.server_key, &p.client_key}) {
    chmod(key->c_str(), 0600);
  }
  return p;
}

}  // namespace unloadkv::testing
