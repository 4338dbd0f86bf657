// A cluster whose etcd speaks only TLS with client certificates and has its own users
// switched on (docs/security.md): certificates made by openssl in the test, an etcd user whose
// role may touch only the cluster's keys. kvclient creates the cluster, three authenticated
// kvservers form it, the SDK writes through it, the primary is SIGKILLed and a backup takes
// over, and every acknowledged key is still there. Clients that lack the CA, the client
// certificate or the password are refused with errors that say which.
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/kv/process_harness.h"
#include "tests/support/etcd_process.h"
#include "tests/support/test_auth.h"
#include "tests/support/test_pki.h"
#include "transport/base/logging.h"
#include "transport/cluster/etcd_cluster_map.h"

namespace unloadkv {
namespace {

using cluster::ClusterView;
using cluster::ShardInfo;
using testing::Output;
using testing::RunBinary;
using testing::ServerProcess;

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

TEST(EtcdTlsTest, AClusterFormsFailsOverAndServesOnEtcdWithTlsAndUsers) {
  SetMinLogLevel(LogLevel::kError);
  absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(TmpPath("pki"));
  ASSERT_TRUE(pki.ok()) << pki.status();
  testing::EtcdProcess::Options eo;
  eo.ca_file = pki->ca_cert;
  eo.cert_file = pki->server_cert;
  eo.key_file = pki->server_key;
  eo.client_cert_file = pki->client_cert;
  eo.client_key_file = pki->client_key;
  auto etcd = testing::EtcdProcess::Start(eo);
  if (!etcd.ok() && etcd.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << etcd.status().message();
  }
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string password = "kv-password-0123456789";
  absl::StatusOr<std::string> root =
      (*etcd)->EnableAuth("root-password-0123456789", "unloadkv", password, "/unloadkv/");
  ASSERT_TRUE(root.ok()) << root.status() << (*etcd)->LogTail();
  const std::string password_file = TmpPath("etcd_password");
  {
    std::ofstream(password_file) << password << "\n";
    chmod(password_file.c_str(), 0600);
  }
  const std::string wrong_file = TmpPath("etcd_wrong_password");
  {
    std::ofstream(wrong_file) << "not-the-password\n";
    chmod(wrong_file.c_str(), 0600);
  }
  const std::string endpoint = (*etcd)->endpoint();
  const std::vector<std::string> etcd_flags = {"--etcd=" + endpoint,
                                               "--cluster=tls",
                                               "--etcd_ca=" + pki->ca_cert,
                                               "--etcd_cert=" + pki->client_cert,
                                               "--etcd_key=" + pki->client_key,
                                               "--etcd_user=unloadkv",
                                               "--etcd_password_file=" + password_file};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> all = etcd_flags;
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };

  // Refusals that name what is missing.
  Output plain =
      RunBinary("client/kvclient", {"--etcd=" + endpoint, "--cluster=tls", "cluster", "status"});
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(plain.err, "--etcd_ca")) << plain.err;
  Output no_cert =
      RunBinary("client/kvclient", {"--etcd=" + endpoint, "--cluster=tls",
                                    "--etcd_ca=" + pki->ca_cert, "--etcd_user=unloadkv",
                                    "--etcd_password_file=" + password_file, "cluster", "status"});
  EXPECT_NE(no_cert.exit_code, 0) << no_cert.out;
  std::vector<std::string> wrong = etcd_flags;
  wrong.back() = "--etcd_password_file=" + wrong_file;
  wrong.insert(wrong.end(), {"cluster", "status"});
  Output bad_password = RunBinary("client/kvclient", wrong);
  EXPECT_NE(bad_password.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad_password.err, "authenticating to etcd as user \"unloadkv\""))
      << bad_password.err;

  // The cluster, created by an admin holding the etcd user.
  Output init =
      RunBinary("client/kvclient", with({"cluster", "init", "--shards=1", "--replicas=3"}));
  ASSERT_EQ(init.exit_code, 0) << init.err;
  const std::string auth = testing::WriteTestAuthFile({"n1", "n2", "n3"});
  std::map<std::string, std::unique_ptr<ServerProcess>> nodes;
  for (const char* n : {"n1", "n2", "n3"}) {
    nodes[n] = std::make_unique<ServerProcess>(
        with({std::string("--node=") + n, "--auth_file=" + auth, "--lease_ttl_s=2"}),
        /*capture_stderr=*/true);
    ASSERT_FALSE(nodes[n]->address().empty()) << n << " did not start";
  }
  cluster::EtcdSecurity sec;
  sec.ca_file = pki->ca_cert;
  sec.cert_file = pki->client_cert;
  sec.key_file = pki->client_key;
  sec.user = "unloadkv";
  sec.password_file = password_file;
  auto map = cluster::EtcdClusterMap::Open(endpoint, "tls", sec);
  ASSERT_TRUE(map.ok()) << map.status();
  auto wait_for = [&](const std::function<bool(const ShardInfo&, const ClusterView&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      absl::StatusOr<ClusterView> v = (*map)->Read();
      if (v.ok() && !v->shard_list.empty() && done(v->shard_list[0], *v)) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  };
  ASSERT_TRUE(wait_for([](const ShardInfo& s, const ClusterView& v) {
    return v.IsLive(s.primary) && s.backups.size() == 2 && s.joining.empty();
  })) << nodes["n1"]->stderr_text();

  ClientOptions o;
  o.etcd = endpoint;
  o.cluster = "tls";
  o.etcd_ca = pki->ca_cert;
  o.etcd_cert = pki->client_cert;
  o.etcd_key = pki->client_key;
  o.etcd_user = "unloadkv";
  o.etcd_password_file = password_file;
  o.auth_file = auth;
  o.user = testing::kTestClientUser;
  o.failover_timeout = absl::Seconds(20);
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE((*c)->Put(absl::StrCat("k", i), absl::StrCat("v", i)).ok());
  }
  // Failover: the primary dies; a backup takes over through etcd's TLS and users.
  const std::string primary = (*(*map)->Read()).shard_list[0].primary;
  nodes[primary]->Kill();
  ASSERT_TRUE(wait_for([&](const ShardInfo& s, const ClusterView& v) {
    return !s.primary.empty() && s.primary != primary && v.IsLive(s.primary);
  }));
  ASSERT_TRUE((*c)->Put("after", "failover").ok());
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<std::string> v = (*c)->Get(absl::StrCat("k", i));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, absl::StrCat("v", i));
  }
  EXPECT_EQ(*(*c)->Get("after"), "failover");
}

}  // namespace
}  // namespace unloadkv
