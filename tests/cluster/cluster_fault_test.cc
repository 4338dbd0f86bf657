// The fault matrix (docs/cluster.md): real kvserver processes, a real etcd, and a client
// process writing unique keys and reading them back, with one fault per case. Afterwards every
// acknowledged write is read back with its value (none may be lost) and the recorded per-key
// histories must be linearizable. Prints a table: case, writes acknowledged, writes lost,
// failover time, the longest stop of acknowledged writes, linearizable.
//
// The path policy of every write (the client's value writes and the primary's replication
// writes) is UNLOADKV_FAULT_POLICY's (default adaptive, which on the soft transport keeps most
// writes offloaded): cluster_fault_unload_test runs the primary failures with every write
// unloaded, so that a write acknowledged before its target worker copied it would be lost.
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/kv/linearizability.h"
#include "tests/kv/process_harness.h"
#include "tests/support/etcd_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_auth.h"
#include "transport/base/logging.h"
#include "transport/cluster/etcd_cluster_map.h"
#include "transport/placement/shard_move.h"
#include "transport/storage/posix_disk.h"

namespace unloadkv {
namespace {

using cluster::ClusterView;
using cluster::ShardInfo;
using cluster::ShardState;
using testing::KvOp;

constexpr int kLeaseTtlSeconds = 2;

std::string Policy() {
  const char* p = std::getenv("UNLOADKV_FAULT_POLICY");
  return p != nullptr ? p : "adaptive";
}
// --policy for kvserver and cluster_load.
std::string PolicyFlag() { return "--policy=" + Policy(); }

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

int64_t MonoNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// The client process and the lines it logged.
class LoadProcess {
 public:
  LoadProcess(const std::string& etcd, const std::string& cluster, const std::string& prefix,
              const std::string& auth_file) {
    child_ = testing::Spawn(
        {"tests/cluster/cluster_load", "--etcd=" + etcd, "--cluster=" + cluster,
         "--prefix=" + prefix, "--threads=4", PolicyFlag(), "--auth_file=" + auth_file,
         std::string("--user=") + testing::kTestClientUser},
        /*capture_stderr=*/false, /*alarm_seconds=*/180);
    reader_ = std::thread([this] {
      while (true) {
        std::string line = testing::ReadLine(child_.out_fd);
        if (line.empty()) break;  // end of stream (every logged line is non-empty)
        std::lock_guard<std::mutex> l(mu_);
        if (line == "READY") {
          ready_ = true;
        } else {
          lines_.push_back(std::move(line));
        }
      }
    });
  }
  ~LoadProcess() { Stop(SIGTERM); }

  bool WaitReady(absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (ready_) return true;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  size_t Lines() {
    std::lock_guard<std::mutex> l(mu_);
    return lines_.size();
  }
  // SIGTERM: finish the operations in progress and exit; SIGKILL: die at once.
  void Stop(int sig) {
    if (child_.pid <= 0) return;
    kill(child_.pid, sig);
    testing::WaitExit(child_.pid);
    child_.pid = -1;
    reader_.join();
    close(child_.out_fd);
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }

 private:
  testing::Child child_;
  std::thread reader_;
  std::mutex mu_;
  bool ready_ = false;
  std::vector<std::string> lines_;
};

// Watches the map (its own handle, every 5 ms) for the rule no fault may break: one primary
// per epoch. Stop() returns what it saw break it ("" when nothing did).
class OnePrimaryPerEpoch {
 public:
  OnePrimaryPerEpoch(const std::string& etcd, const std::string& cluster) {
    auto map = cluster::EtcdClusterMap::Open(etcd, cluster);
    if (map.ok()) map_ = std::move(*map);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        if (map_ != nullptr) {
          if (absl::StatusOr<cluster::ClusterView> v = map_->Read(); v.ok()) Check(*v);
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
    });
  }
  ~OnePrimaryPerEpoch() { Stop(); }
  std::string Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (map_ == nullptr) return "the watcher could not open the map";
    return broken_;
  }

 private:
  void Check(const cluster::ClusterView& v) {
    for (const ShardInfo& s : v.shard_list) {
      if (s.primary.empty()) continue;
      auto [it, fresh] = primaries_.try_emplace({s.id, s.epoch}, s.primary);
      if (!fresh && it->second != s.primary && broken_.empty()) {
        broken_ = absl::StrCat("shard ", s.id, " epoch ", s.epoch,
                               " named two primaries: ", it->second, " and ", s.primary);
      }
    }
  }

  std::unique_ptr<cluster::EtcdClusterMap> map_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::map<std::pair<uint32_t, uint64_t>, std::string> primaries_;  // the watcher's own
  std::string broken_;
};

// `kvclient cluster move` of shard 0's primary role to `to`, on a thread of its own with a
// map handle of its own, as an operator's command runs beside the cluster. Join() returns its
// outcome.
class MoveThread {
 public:
  MoveThread(const std::string& etcd, const std::string& cluster, const std::string& to) {
    thread_ = std::thread([this, etcd, cluster, to] {
      auto map = cluster::EtcdClusterMap::Open(etcd, cluster);
      if (!map.ok()) {
        status_ = map.status();
        return;
      }
      MoveRequest req;
      req.shard = 0;
      req.to = to;
      status_ = RunMove(map->get(), req, absl::Seconds(40), absl::Milliseconds(50),
                        [](const std::string&) {});
    });
  }
  ~MoveThread() { Join(); }
  absl::Status Join() {
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  std::thread thread_;
  absl::Status status_;
};

struct Row {
  std::string name;
  size_t acked = 0, lost = 0, unknown = 0;
  std::string failover, write_gap;
  std::string unloaded = "-";  // share of the primary's value writes unloaded before the fault
  bool linearizable = false;
};

class ClusterFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetMinLogLevel(LogLevel::kError);
    auto etcd = testing::EtcdProcess::Start();
    if (!etcd.ok()) {
      skip_ = std::string(etcd.status().message());
      return;
    }
    etcd_ = std::move(*etcd).release();
    // Every node and the client authenticate, as in production (docs/security.md).
    auth_file_ = new std::string(testing::WriteTestAuthFile({"n1", "n2", "n3", "n4", "n5"}));
  }
  static void TearDownTestSuite() {
    std::printf("\n%-44s %8s %6s %8s %10s %10s %8s %s\n", "case", "acked", "lost", "unknown",
                "failover", "write gap", "unloaded", "linearizable");
    for (const Row& r : *rows_) {
      std::printf("%-44s %8zu %6zu %8zu %10s %10s %8s %s\n", r.name.c_str(), r.acked, r.lost,
                  r.unknown, r.failover.c_str(), r.write_gap.c_str(), r.unloaded.c_str(),
                  r.linearizable ? "yes" : "NO");
    }
    std::printf(
        "(policy %s; lease TTL %d s; failover: fault to a new live primary in the map; write "
        "gap: the longest time without an acknowledged write, after the fault; unloaded: share "
        "of the primary's value writes unloaded before the fault)\n",
        Policy().c_str(), kLeaseTtlSeconds);
    rows_->clear();  // a later suite of this fixture prints its own
    delete etcd_;
    etcd_ = nullptr;
  }

  void SetUp() override {
    if (etcd_ == nullptr) GTEST_SKIP() << skip_;
    cluster_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    auto map = cluster::EtcdClusterMap::Open(etcd_->endpoint(), cluster_);
    ASSERT_TRUE(map.ok());
    map_ = std::move(*map);
  }
  void TearDown() override {
    if (etcd_ != nullptr) kill(etcd_->pid(), SIGCONT);  // a case that failed while etcd slept
    load_.reset();
    for (auto& [name, n] : nodes_) {
      if (n->pid() > 0) {
        kill(n->pid(), SIGCONT);
        n->Kill();
      }
    }
  }

  void Init(int replicas) {
    ASSERT_TRUE(map_->Create(replicas, *cluster::InitialShards(1, {})).ok());
  }
  void StartNode(const std::string& name) {
    std::vector<std::string> flags = {"--etcd=" + etcd_->endpoint(),
                                      "--cluster=" + cluster_,
                                      "--node=" + name,
                                      absl::StrCat("--lease_ttl_s=", kLeaseTtlSeconds),
                                      "--auth_file=" + *auth_file_,
                                      "--fault_signals",
                                      PolicyFlag(),
                                      "--metrics=127.0.0.1:0"};
    flags.insert(flags.end(), extra_flags_.begin(), extra_flags_.end());
    if (durable_) {
      const char* tmp = std::getenv("TEST_TMPDIR");
      flags.push_back(
          absl::StrCat("--data_dir=", tmp != nullptr ? tmp : "/tmp", "/", cluster_, "/", name));
      flags.push_back("--fsync=always");
    }
    nodes_[name] = std::make_unique<testing::ServerProcess>(flags);
    ASSERT_FALSE(nodes_[name]->address().empty()) << name << " did not start";
  }
  std::string DataDir(const std::string& name) const {
    const char* tmp = std::getenv("TEST_TMPDIR");
    return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", cluster_, "/", name);
  }
  ClusterView View() {
    absl::StatusOr<ClusterView> v = map_->Read();
    return v.ok() ? *v : ClusterView{};
  }
  // Until `done(view)` holds, polling every 10 ms; false after `limit`.
  bool WaitFor(const std::function<bool(const ClusterView&)>& done, absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      ClusterView v = View();
      if (!v.shard_list.empty() && done(v)) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  bool WaitServing(int backups) {
    return WaitFor(
        [&](const ClusterView& v) {
          const ShardInfo& s = v.shard_list[0];
          return v.IsLive(s.primary) && static_cast<int>(s.backups.size()) >= backups &&
                 s.joining.empty();
        },
        absl::Seconds(30));
  }
  std::string Primary() { return View().shard_list[0].primary; }

  // Until shard 0 is whole: a primary (`primary`, unless empty) and one backup, both live,
  // nobody joining and no hand-over asked; "primary+backup" then ("" after 10 x TTL).
  std::string WaitWhole(const std::string& primary) {
    std::string group;
    WaitFor(
        [&](const ClusterView& v) {
          const ShardInfo& s = v.shard_list[0];
          if (s.backups.size() != 1 || !v.IsLive(s.primary) || !v.IsLive(s.backups[0]) ||
              !s.joining.empty() || !s.handover_to.empty() ||
              (!primary.empty() && s.primary != primary)) {
            return false;
          }
          group = absl::StrCat(s.primary, "+", s.backups[0]);
          return true;
        },
        absl::Seconds(10 * kLeaseTtlSeconds));
    return group;
  }

  // Shard 0's group and the live nodes, as a failure message shows them.
  std::string DescribeShard0() {
    const ClusterView v = View();
    if (v.shard_list.empty()) return "(no map)";
    const ShardInfo& s = v.shard_list[0];
    std::vector<std::string> live;
    for (const auto& [name, node] : v.nodes) live.push_back(name);
    return absl::StrCat("epoch ", s.epoch, ", primary \"", s.primary, "\", backups [",
                        absl::StrJoin(s.backups, ","), "], joining [",
                        absl::StrJoin(s.joining, ","), "], handover_to \"", s.handover_to,
                        "\", live [", absl::StrJoin(live, ","), "], placer \"", v.placer, "\"");
  }

  // One shard on n1..n3 with every replica in place, and the client process running until it
  // logged `lines` operations.
  void StartThreeReplicasUnderLoad(size_t lines) {
    Init(3);
    for (const char* n : {"n1", "n2", "n3"}) StartNode(n);
    ASSERT_TRUE(WaitServing(2));
    StartLoad();
    LoadFor(lines);
    RecordUnloadedShare();
    ExpectPrimaryReports(3, 3);
  }

  // Waits (bounded) until the primary's metrics report the group size `replicas` of `wanted`
  // for the shard (what the under-replication alert in deploy/prometheus compares).
  void ExpectPrimaryReports(int replicas, int wanted) {
    const std::string shard = absl::StrCat("{shard=\"", View().shard_list[0].id, "\"}");
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    std::string m;
    do {
      m = testing::Scrape(nodes_[Primary()]->metrics_address());
      if (testing::Sample(m, "unloadkv_shard_replicas" + shard) == replicas &&
          testing::Sample(m, "unloadkv_shard_replicas_wanted" + shard) == wanted) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(20));
    } while (absl::Now() < deadline);
    ADD_FAILURE() << "the primary does not report " << replicas << " of " << wanted
                  << " replicas for shard " << shard << ":\n"
                  << m;
  }

  // The share of the primary's value writes so far that took the unload path; with every write
  // unloaded it must be most of them, or the run did not test the unload path.
  void RecordUnloadedShare() {
    const std::string m = testing::Scrape(nodes_[Primary()]->metrics_address());
    const double unloaded = testing::Sample(m, "unloadkv_value_writes_total{path=\"unload\"}");
    const double all =
        unloaded + testing::Sample(m, "unloadkv_value_writes_total{path=\"offload\"}");
    const double share = all > 0 ? unloaded / all : 0;
    unloaded_ = absl::StrFormat("%.0f%%", 100 * share);
    if (Policy() == "unload") EXPECT_GT(share, 0.9) << m;
  }

  void StartLoad() {
    load_ = std::make_unique<LoadProcess>(etcd_->endpoint(), cluster_, cluster_, *auth_file_);
    ASSERT_TRUE(load_->WaitReady(absl::Seconds(20)));
  }
  // Lets the load run until it logged `n` more lines (bounded).
  void LoadFor(size_t n) {
    const size_t target = load_->Lines() + n;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (load_->Lines() < target && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  }
  // Waits until the map names a live primary other than `old`; the time since `fault_ns`.
  std::string WaitFailover(const std::string& old, int64_t fault_ns) {
    const bool ok = WaitFor(
        [&](const ClusterView& v) {
          return v.shard_list[0].primary != old && v.IsLive(v.shard_list[0].primary);
        },
        absl::Seconds(6 * kLeaseTtlSeconds));
    EXPECT_TRUE(ok) << "no new primary within " << 6 * kLeaseTtlSeconds << " s";
    return ok ? absl::StrFormat("%.0f ms", (MonoNow() - fault_ns) / 1e6) : "none";
  }

  // Stops the load (unless it was killed), reads every acknowledged write back, checks the
  // histories, and records the row.
  void Verify(const std::string& name, int64_t fault_ns, std::string failover,
              bool kill_load = false) {
    load_->Stop(kill_load ? SIGKILL : SIGTERM);
    std::vector<KvOp> history;
    std::map<std::string, std::string> acked;
    Row row;
    row.name = name;
    row.failover = std::move(failover);
    row.unloaded = unloaded_;
    std::vector<int64_t> acked_at;  // response times of acknowledged writes
    for (const std::string& line : load_->lines()) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() != 7) continue;  // a line cut by SIGKILL
      KvOp op;
      op.kind = f[0] == "P" ? KvOp::kPut : KvOp::kGet;
      (void)absl::SimpleAtoi(f[1], &op.client);
      op.key = f[2];
      int64_t invoke = 0, response = 0;
      (void)absl::SimpleAtoi(f[4], &invoke);
      op.invoke_ns = invoke;
      const bool known = f[5] != "-" && absl::SimpleAtoi(f[5], &response);
      if (known) op.response_ns = response;
      const std::string& code = f[6];
      if (op.kind == KvOp::kPut) {
        op.value = f[3];
        if (code == "OK") {
          acked[op.key] = f[3];
          acked_at.push_back(response);
        } else if (known) {
          continue;  // refused: never applied
        } else {
          ++row.unknown;
        }
      } else {
        if (code == "OK") {
          op.value = f[3];
        } else if (code == "NOT_FOUND") {
          op.value = std::nullopt;
        } else {
          continue;  // a failed read observed nothing
        }
      }
      history.push_back(std::move(op));
    }
    row.acked = acked.size();
    // The longest stretch without an acknowledged write that ends after the fault: how long
    // writes stopped.
    std::sort(acked_at.begin(), acked_at.end());
    int64_t gap = 0;
    for (size_t i = 1; i < acked_at.size(); ++i) {
      if (acked_at[i] > fault_ns) gap = std::max(gap, acked_at[i] - acked_at[i - 1]);
    }
    row.write_gap = fault_ns == 0 ? "-" : absl::StrFormat("%.0f ms", gap / 1e6);
    // Read everything back through the SDK, as a client that starts now.
    ClientOptions o;
    o.etcd = etcd_->endpoint();
    o.cluster = cluster_;
    o.failover_timeout = absl::Seconds(30);
    o.auth_file = *auth_file_;
    o.user = testing::kTestClientUser;
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& [key, value] : acked) {
      KvOp op;
      op.kind = KvOp::kGet;
      op.key = key;
      op.client = 1000;
      op.invoke_ns = MonoNow();
      absl::StatusOr<std::string> got = (*c)->Get(key);
      op.response_ns = MonoNow();
      if (got.ok()) {
        op.value = *got;
      } else if (got.status().code() == absl::StatusCode::kNotFound) {
        op.value = std::nullopt;
      } else {
        ADD_FAILURE() << "read back " << key << ": " << got.status();
        continue;
      }
      if (op.value != value) {
        ++row.lost;
        ADD_FAILURE() << "acknowledged write lost: " << key << " = " << value << ", read "
                      << op.value.value_or("(absent)");
      }
      history.push_back(std::move(op));
    }
    absl::Status lin = testing::CheckLinearizable(history);
    row.linearizable = lin.ok();
    EXPECT_TRUE(lin.ok()) << lin;
    EXPECT_EQ(row.lost, 0u);
    EXPECT_GT(row.acked, 0u);
    rows_->push_back(row);
  }

  // One shard on n1 (primary) and n2 (backup), and n3 registered with no role; the client
  // process running until it logged `lines` operations.
  void StartTwoReplicasAndASpareUnderLoad(size_t lines) {
    Init(2);
    StartNode("n1");
    ASSERT_TRUE(WaitServing(0));
    StartNode("n2");
    ASSERT_TRUE(WaitServing(1));
    StartNode("n3");
    ASSERT_TRUE(WaitFor([](const ClusterView& v) { return v.IsLive("n3"); }, absl::Seconds(10)));
    StartLoad();
    LoadFor(lines);
    RecordUnloadedShare();
  }

  // Waits until `node` is named in shard 0's group (joining or a backup) or a hand-over to it
  // is asked; what the map said then ("" after 20 s).
  std::string WaitInGroup(const std::string& node) {
    std::string seen;
    WaitFor(
        [&](const ClusterView& v) {
          const ShardInfo& s = v.shard_list[0];
          if (s.handover_to == node) {
            seen = "handing over";
          } else if (Contains(s.joining, node)) {
            seen = "joining";
          } else if (s.HasReplica(node)) {
            seen = s.primary == node ? "primary" : "backup";
          }
          return !seen.empty();
        },
        absl::Seconds(20));
    return seen;
  }

  // Until shard 0 is served by a live primary with `backups` backups, nobody joining and no
  // hand-over asked, none of them `gone`; the time since `fault_ns`.
  std::string WaitSettled(size_t backups, const std::string& gone, int64_t fault_ns) {
    const bool ok = WaitFor(
        [&](const ClusterView& v) {
          const ShardInfo& s = v.shard_list[0];
          return v.IsLive(s.primary) && s.backups.size() == backups && s.joining.empty() &&
                 s.handover_to.empty() && !s.HasReplica(gone);
        },
        absl::Seconds(10 * kLeaseTtlSeconds));
    EXPECT_TRUE(ok) << "shard 0 did not settle without " << gone << ": " << DescribeShard0();
    return ok ? absl::StrFormat("%.0f ms", (MonoNow() - fault_ns) / 1e6) : "none";
  }

  static inline testing::EtcdProcess* etcd_ = nullptr;
  static inline std::string skip_;
  static inline std::string* auth_file_ = nullptr;  // the nodes' and the client's users
  static inline std::vector<Row>* rows_ = new std::vector<Row>();
  std::string cluster_;
  std::unique_ptr<cluster::EtcdClusterMap> map_;
  std::map<std::string, std::unique_ptr<testing::ServerProcess>> nodes_;
  std::unique_ptr<LoadProcess> load_;
  std::string unloaded_ = "-";
  bool durable_ = false;                  // nodes log to a data dir of their own, --fsync=always
  std::vector<std::string> extra_flags_;  // more kvserver flags for StartNode
};

TEST_F(ClusterFaultTest, KillBackup) {
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const std::string backup = View().shard_list[0].backups[0];
  const int64_t fault = MonoNow();
  nodes_[backup]->Kill();
  // The primary drops the dead backup once its lease expired; writes wait for that.
  ASSERT_TRUE(WaitFor([&](const ClusterView& v) { return !v.shard_list[0].HasReplica(backup); },
                      absl::Seconds(6 * kLeaseTtlSeconds)));
  const std::string dropped = absl::StrFormat("%.0f ms", (MonoNow() - fault) / 1e6);
  ExpectPrimaryReports(2, 3);  // no spare node: under-replicated
  LoadFor(500);
  Verify("SIGKILL backup (dropped from group)", fault, dropped);
}

TEST_F(ClusterFaultTest, KillPrimary) {
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const std::string primary = Primary();
  const int64_t fault = MonoNow();
  nodes_[primary]->Kill();
  const std::string failover = WaitFailover(primary, fault);
  LoadFor(500);
  Verify("SIGKILL primary", fault, failover);
}

TEST_F(ClusterFaultTest, KillClientInTheMiddleOfPuts) {
  StartThreeReplicasUnderLoad(800);
  if (HasFatalFailure()) return;
  Verify("SIGKILL client", 0, "-", /*kill_load=*/true);
  // The servers carry on: a new client writes and reads.
  StartLoad();
  LoadFor(200);
  Verify("  (a new client after it)", 0, "-");
}

TEST_F(ClusterFaultTest, PausedPrimaryNeitherAcknowledgesNorServesStaleReads) {
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const std::string primary = Primary();
  const std::string old_address = nodes_[primary]->address();
  const int64_t fault = MonoNow();
  kill(nodes_[primary]->pid(), SIGSTOP);
  const std::string failover = WaitFailover(primary, fault);
  // A write the successor acknowledged, which the paused node never saw.
  ClientOptions co;
  co.etcd = etcd_->endpoint();
  co.cluster = cluster_;
  co.auth_file = *auth_file_;
  co.user = testing::kTestClientUser;
  auto cluster_client = Client::Connect(co);
  ASSERT_TRUE(cluster_client.ok());
  ASSERT_TRUE((*cluster_client)->Put("after-failover", "new").ok());
  // Talk to the paused node directly (as a client with a stale map would) right after it
  // resumes: it must not acknowledge a write nor answer the read with its stale state.
  ClientOptions direct;
  direct.server = old_address;
  direct.timeout = absl::Seconds(3);
  direct.max_retries = 0;
  direct.auth_file = *auth_file_;
  direct.user = testing::kTestClientUser;
  std::atomic<bool> probe_done{false};
  absl::Status put_probe, get_probe;
  std::thread probe([&] {
    auto c = Client::Connect(direct);  // waits while the node is stopped
    if (!c.ok()) {
      put_probe = get_probe = c.status();
    } else {
      put_probe = (*c)->Put("probe", "x");
      get_probe = (*c)->Get("after-failover").status();
    }
    probe_done = true;
  });
  // Give the probe time to start dialing the stopped node (nothing to observe from outside:
  // its connect sits in the paused node's accept queue), then wake the node.
  absl::SleepFor(absl::Milliseconds(200));
  kill(nodes_[primary]->pid(), SIGCONT);
  probe.join();
  EXPECT_FALSE(put_probe.ok()) << "the deposed primary acknowledged a write";
  EXPECT_FALSE(get_probe.ok()) << "the deposed primary served a read (stale: NOT_FOUND)";
  EXPECT_NE(get_probe.code(), absl::StatusCode::kNotFound) << "stale read: " << get_probe;
  EXPECT_EQ((*cluster_client)->Get("probe").status().code(), absl::StatusCode::kNotFound);
  LoadFor(500);
  Verify("SIGSTOP primary > TTL, SIGCONT", fault, failover);
}

TEST_F(ClusterFaultTest, NetworkCutIsolatesThePrimaryThenHeals) {
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const std::string primary = Primary();
  const int64_t fault = MonoNow();
  kill(nodes_[primary]->pid(), SIGUSR1);  // cut off from etcd and the other nodes
  const std::string failover = WaitFailover(primary, fault);
  LoadFor(300);
  kill(nodes_[primary]->pid(), SIGUSR2);  // heal: it must step down and rejoin
  ASSERT_TRUE(WaitServing(2));
  EXPECT_NE(Primary(), primary);
  LoadFor(300);
  Verify("network cut of primary, healed", fault, failover);
}

TEST_F(ClusterFaultTest, EtcdStoppedAndRestartedUnderLoad) {
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const ShardInfo before = View().shard_list[0];
  const int64_t fault = MonoNow();
  etcd_->Stop();
  // Longer than the lease TTL: nodes can renew nothing, yet the data path goes on.
  const size_t lines_before = load_->Lines();
  absl::SleepFor(absl::Seconds(kLeaseTtlSeconds + 1));
  const size_t during = load_->Lines() - lines_before;
  ASSERT_TRUE(etcd_->Restart().ok()) << etcd_->LogTail();
  LoadFor(300);
  const ShardInfo after = View().shard_list[0];
  EXPECT_GT(during, 50u) << "the cluster stopped serving while etcd was down";
  // No split brain: nobody took over, the primary and epoch are unchanged.
  EXPECT_EQ(after.primary, before.primary);
  EXPECT_EQ(after.epoch, before.epoch);
  Verify(absl::StrCat("etcd down ", kLeaseTtlSeconds + 1, " s, restarted (", during, " ops)"),
         fault, "none");
}

// etcd paused for longer than the TTL: when it resumes, every node's lease has lapsed at once.
// The nodes register again and keep the replicas the map still names; nothing acknowledged
// may be lost (before, the first node back found no replica left and served the shard empty).
TEST_F(ClusterFaultTest, EtcdPausedPastTheTtlEveryLeaseLapsesAtOnce) {
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const int64_t fault = MonoNow();
  ASSERT_EQ(kill(etcd_->pid(), SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(kLeaseTtlSeconds + 2));  // the fault's length, not a wait
  ASSERT_EQ(kill(etcd_->pid(), SIGCONT), 0);
  const bool serving = WaitFor(
      [&](const ClusterView& v) {
        const ShardInfo& s = v.shard_list[0];
        return v.IsLive(s.primary) && s.backups.size() == 2;
      },
      absl::Seconds(10 * kLeaseTtlSeconds));
  EXPECT_TRUE(serving) << "the group did not come back whole";
  LoadFor(300);
  Verify(absl::StrCat("etcd paused ", kLeaseTtlSeconds + 2, " s: every lease lapsed"), fault, "-");
}

TEST_F(ClusterFaultTest, TwoFailuresInARowWithThreeReplicas) {
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const std::string first = Primary();
  const int64_t fault = MonoNow();
  nodes_[first]->Kill();
  const std::string failover1 = WaitFailover(first, fault);
  // The successor re-replicates to the third node before the second failure.
  ASSERT_TRUE(WaitServing(1));
  LoadFor(300);
  const std::string second = Primary();
  const int64_t fault2 = MonoNow();
  nodes_[second]->Kill();
  const std::string failover2 = WaitFailover(second, fault2);
  LoadFor(300);
  Verify("SIGKILL primary, then its successor", fault2, absl::StrCat(failover1, " + ", failover2));
}

// A power cut of the processes: every node SIGKILLed at once under load, then restarted with
// its data dir (--fsync=always). Every acknowledged write is back, and the histories (before,
// across and after) are linearizable. Before durability, the shard came back empty.
TEST_F(ClusterFaultTest, KillEveryNodeThenRestartThemWithTheirDataDirs) {
  durable_ = true;
  StartThreeReplicasUnderLoad(500);
  if (HasFatalFailure()) return;
  const int64_t fault = MonoNow();
  for (const char* n : {"n1", "n2", "n3"}) nodes_[n]->Kill();
  // Each waits for its previous incarnation's lease to lapse, then recovers and rejoins.
  for (const char* n : {"n1", "n2", "n3"}) StartNode(n);
  const bool whole = WaitServing(2);
  EXPECT_TRUE(whole) << "the group did not come back whole";
  const std::string back = absl::StrFormat("%.0f ms", (MonoNow() - fault) / 1e6);
  LoadFor(300);
  Verify("SIGKILL all nodes, restart (logs)", fault, back);
}

// A torn log tail on the primary: every node SIGKILLed under load, then the primary's last
// segment cut by 3 bytes (its last record, which its backups hold too, perhaps acknowledged).
// The primary reports the cut at start-up, and the group comes back with every acknowledged
// write (epoch and seq pick the longer logs), linearizable.
TEST_F(ClusterFaultTest, ATornTailOnThePrimaryIsCutAndReportedAndNothingIsLost) {
  durable_ = true;
  StartThreeReplicasUnderLoad(300);
  if (HasFatalFailure()) return;
  const std::string primary = Primary();
  const std::string shard_dir = absl::StrCat(DataDir(primary), "/shard-", View().shard_list[0].id);
  const int64_t fault = MonoNow();
  for (const char* n : {"n1", "n2", "n3"}) nodes_[n]->Kill();
  storage::PosixDisk disk;
  std::string last;  // names sort by their zero-padded numbers
  for (const std::string& name : disk.List(shard_dir).value_or(std::vector<std::string>{})) {
    if (absl::EndsWith(name, ".log")) last = name;
  }
  ASSERT_FALSE(last.empty()) << "no log segment in " << shard_dir;
  const std::string segment = shard_dir + "/" + last;
  const uint64_t size = disk.ReadAll(segment)->size();
  ASSERT_GT(size, 3u) << segment;
  ASSERT_TRUE(disk.Truncate(segment, size - 3).ok());
  for (const char* n : {"n1", "n2", "n3"}) StartNode(n);
  std::string line;
  for (int i = 0; i < 20 && !absl::StrContains(line, "durability:"); ++i) {
    line = nodes_[primary]->NextLine();
  }
  EXPECT_TRUE(absl::StrContains(line, "cut a torn tail of")) << line;
  EXPECT_TRUE(absl::StrContains(line, segment)) << line;
  const bool whole = WaitServing(2);
  EXPECT_TRUE(whole) << "the group did not come back whole";
  const std::string back = absl::StrFormat("%.0f ms", (MonoNow() - fault) / 1e6);
  LoadFor(200);
  Verify("SIGKILL all, primary's tail torn", fault, back);
}

// A full disk on the primary, as a process test can make one: a file-size limit on the
// running kvserver (prlimit(2), the soft limit) just above its log's current segment. Its
// writes are refused (RESOURCE_EXHAUSTED), nothing acknowledged is lost, and writes go on once
// the limit is lifted (space returns); the histories stay linearizable.
TEST_F(ClusterFaultTest, AFullDiskOnThePrimaryRefusesWritesUntilSpaceReturns) {
  durable_ = true;
  StartThreeReplicasUnderLoad(300);
  if (HasFatalFailure()) return;
  const std::string primary = Primary();
  const std::string shard_dir = absl::StrCat(DataDir(primary), "/shard-", View().shard_list[0].id);
  storage::PosixDisk disk;
  uint64_t largest = 0;
  for (const std::string& name : disk.List(shard_dir).value_or(std::vector<std::string>{})) {
    largest = std::max<uint64_t>(largest, disk.ReadAll(shard_dir + "/" + name)->size());
  }
  const int64_t fault = MonoNow();
  rlimit limit{largest + 4096, RLIM_INFINITY};
  ASSERT_EQ(prlimit(nodes_[primary]->pid(), RLIMIT_FSIZE, &limit, nullptr), 0);
  auto refused = [&] {
    size_t n = 0;
    for (const std::string& line : load_->lines()) {
      if (absl::EndsWith(line, " RESOURCE_EXHAUSTED")) ++n;
    }
    return n;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (refused() < 20 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(refused(), 20u) << "the full disk refused no writes";
  limit.rlim_cur = RLIM_INFINITY;
  ASSERT_EQ(prlimit(nodes_[primary]->pid(), RLIMIT_FSIZE, &limit, nullptr), 0);
  const size_t during = refused();
  // Writes are acknowledged again (the log retries once a second): a PUT answered OK after the
  // limit was lifted.
  const int64_t lifted = MonoNow();
  auto acked_since = [&] {
    for (const std::string& line : load_->lines()) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      int64_t response = 0;
      if (f.size() == 7 && f[0] == "P" && f[6] == "OK" && absl::SimpleAtoi(f[5], &response) &&
          response > lifted) {
        return true;
      }
    }
    return false;
  };
  const absl::Time resume_deadline = absl::Now() + absl::Seconds(10);
  while (!acked_since() && absl::Now() < resume_deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(acked_since()) << "no write acknowledged within 10 s of the limit's lifting";
  LoadFor(200);
  Verify(absl::StrCat("full disk on the primary (", during, " refused)"), fault, "-");
}

// Moves under faults (docs/cluster.md, "Moves and drains"): shard 0's primary role moved from
// n1 to n3 while the client writes, with one fault in the middle. Every case also watches the
// map for two primaries at one epoch.

// The destination dies while it catches up: the move fails and takes back what it left, the
// group is n1 and n2 again.
TEST_F(ClusterFaultTest, KillTheMoveDestinationWhileItJoins) {
  StartTwoReplicasAndASpareUnderLoad(400);
  if (HasFatalFailure()) return;
  OnePrimaryPerEpoch watch(etcd_->endpoint(), cluster_);
  MoveThread move(etcd_->endpoint(), cluster_, "n3");
  const std::string seen = WaitInGroup("n3");
  ASSERT_FALSE(seen.empty()) << "n3 never joined";
  const int64_t fault = MonoNow();
  nodes_["n3"]->Kill();
  const absl::Status moved = move.Join();
  EXPECT_FALSE(moved.ok()) << "the move reported success with its destination dead";
  const std::string settled = WaitSettled(1, "n3", fault);
  EXPECT_EQ(Primary(), "n1");
  LoadFor(300);
  EXPECT_EQ(watch.Stop(), "");
  Verify(absl::StrCat("SIGKILL move destination (", seen, ")"), fault, settled);
}

// The source, the primary, dies once the destination holds the values (as it is asked to hand
// over, or just before): a backup takes over as in any failover, and nothing is lost.
TEST_F(ClusterFaultTest, KillTheMoveSourceAsItHandsOver) {
  StartTwoReplicasAndASpareUnderLoad(400);
  if (HasFatalFailure()) return;
  OnePrimaryPerEpoch watch(etcd_->endpoint(), cluster_);
  MoveThread move(etcd_->endpoint(), cluster_, "n3");
  std::string seen;
  ASSERT_TRUE(WaitFor(
      [&](const ClusterView& v) {
        const ShardInfo& s = v.shard_list[0];
        if (s.handover_to == "n3") seen = "handing over";
        if (s.primary == "n1" && Contains(s.backups, "n3")) seen = "n3 a backup";
        return !seen.empty() || s.primary == "n3";
      },
      absl::Seconds(20)));
  ASSERT_FALSE(seen.empty()) << "the move ended before the fault";
  const int64_t fault = MonoNow();
  nodes_["n1"]->Kill();
  const std::string failover = WaitFailover("n1", fault);
  // The move may end either way: n3 took over (done), or n2 did (its primary role is n2's).
  (void)move.Join();
  WaitSettled(1, "n1", fault);
  LoadFor(300);
  EXPECT_EQ(watch.Stop(), "");
  Verify(absl::StrCat("SIGKILL move source (", seen, ")"), fault, failover);
}

// The decision-maker dies: `kvclient cluster move` SIGKILLed once the destination joined. The
// cluster serves on with the extra replica; the same command run again finishes the move.
TEST_F(ClusterFaultTest, KillTheMoveCommandThenRunItAgain) {
  StartTwoReplicasAndASpareUnderLoad(400);
  if (HasFatalFailure()) return;
  OnePrimaryPerEpoch watch(etcd_->endpoint(), cluster_);
  const std::vector<std::string> command = {"client/kvclient",
                                            "--etcd=" + etcd_->endpoint(),
                                            "--cluster=" + cluster_,
                                            "cluster",
                                            "move",
                                            "--shard=0",
                                            "--to=n3"};
  testing::Child first = testing::Spawn(command, /*capture_stderr=*/false, /*alarm_seconds=*/60);
  const std::string seen = WaitInGroup("n3");
  const int64_t fault = MonoNow();
  kill(first.pid, SIGKILL);
  testing::WaitExit(first.pid);
  close(first.out_fd);
  ASSERT_FALSE(seen.empty()) << "n3 never joined";
  LoadFor(300);  // serving on, whatever the map was left with
  testing::Child again = testing::Spawn(command, /*capture_stderr=*/false, /*alarm_seconds=*/60);
  const std::string said = testing::ReadAll(again.out_fd);
  close(again.out_fd);
  EXPECT_EQ(testing::WaitExit(again.pid), 0) << said;
  EXPECT_EQ(Primary(), "n3") << said;
  const std::string settled = WaitSettled(1, "n1", fault);
  LoadFor(300);
  EXPECT_EQ(watch.Stop(), "");
  Verify(absl::StrCat("SIGKILL the move command (", seen, "), rerun"), fault, settled);
}

// Automatic placement's decision-maker dies mid-move: two shards of two replicas on n1 and n2
// under load, the policy on, then n3 started; once the placer's move onto n3 began, the placer's
// node is SIGKILLed (it is n1 or n2, so a primary or the move's source dies with it). A
// surviving node takes the placer's role over and, with no command, the cluster settles: every
// shard served by two live replicas (a move left half done is finished or trimmed), nothing
// lost, one primary per epoch.
TEST_F(ClusterFaultTest, KillTheAutomaticPlacerMidMove) {
  extra_flags_ = {"--placement_interval_s=1", "--load_interval_s=1"};
  ASSERT_TRUE(map_->Create(2, *cluster::InitialShards(2, {})).ok());
  auto all_served = [](size_t backups) {
    return [backups](const ClusterView& v) {
      for (const ShardInfo& s : v.shard_list) {
        if (!v.IsLive(s.primary) || s.backups.size() != backups || !s.joining.empty() ||
            !s.handover_to.empty()) {
          return false;
        }
      }
      return true;
    };
  };
  StartNode("n1");
  ASSERT_TRUE(WaitFor(all_served(0), absl::Seconds(30)));
  StartNode("n2");
  ASSERT_TRUE(WaitFor(all_served(1), absl::Seconds(30)));
  StartLoad();
  LoadFor(400);
  RecordUnloadedShare();
  OnePrimaryPerEpoch watch(etcd_->endpoint(), cluster_);
  ASSERT_TRUE(map_->SetPolicy({true, 0}, View()).ok());
  std::string placer;
  ASSERT_TRUE(WaitFor(
      [&](const ClusterView& v) {
        placer = v.placer;
        return !placer.empty();
      },
      absl::Seconds(10)));
  StartNode("n3");
  std::string seen;
  ASSERT_TRUE(WaitFor(
      [&](const ClusterView& v) {
        for (const ShardInfo& s : v.shard_list) {
          if (Contains(s.joining, "n3")) seen = absl::StrCat("n3 joining shard ", s.id);
          if (Contains(s.backups, "n3")) seen = absl::StrCat("n3 a backup of shard ", s.id);
        }
        return !seen.empty();
      },
      absl::Seconds(20)))
      << "the placer never moved a role onto n3";
  const int64_t fault = MonoNow();
  nodes_[placer]->Kill();
  std::string successor;
  const bool settled = WaitFor(
      [&](const ClusterView& v) {
        successor = v.placer;
        if (successor.empty() || successor == placer || !all_served(1)(v)) return false;
        for (const ShardInfo& s : v.shard_list) {
          if (s.HasReplica(placer)) return false;
        }
        return true;
      },
      absl::Seconds(20 * kLeaseTtlSeconds));
  EXPECT_TRUE(settled) << "no settled placement without " << placer << " (placer now \""
                       << successor << "\")";
  const std::string took = absl::StrFormat("%.0f ms", (MonoNow() - fault) / 1e6);
  LoadFor(300);
  EXPECT_EQ(watch.Stop(), "");
  Verify(absl::StrCat("SIGKILL the placer ", placer, " (", seen, ")"), fault, took);
}

// etcd stops answering (SIGSTOP, longer than the lease TTL: every lease lapses) in the middle
// of a move: the move waits for the map; when etcd resumes, the destination's lease has lapsed
// too, so the move either completes (n3 registered again in time) or is refused and takes back
// what it left. Which two nodes then hold the shard depends on which registered again first: n1
// keeps its role and n3 leaves; or n2 took over from n1 (its lease lapsed too) and dropped it;
// or n1 dropped n2; and where dropping n3 would leave the group short, n3 stays and completes
// its catch-up (an undo never shrinks a group below its size). Whichever it is, the group comes
// back whole, nothing is lost, one primary per epoch, and the same move run again makes n3 the
// primary of a whole group.
TEST_F(ClusterFaultTest, EtcdPausedPastTheTtlMidMove) {
  StartTwoReplicasAndASpareUnderLoad(400);
  if (HasFatalFailure()) return;
  OnePrimaryPerEpoch watch(etcd_->endpoint(), cluster_);
  auto move = std::make_unique<MoveThread>(etcd_->endpoint(), cluster_, "n3");
  const std::string seen = WaitInGroup("n3");
  ASSERT_FALSE(seen.empty()) << "n3 never joined";
  const int64_t fault = MonoNow();
  ASSERT_EQ(kill(etcd_->pid(), SIGSTOP), 0);
  absl::SleepFor(absl::Seconds(kLeaseTtlSeconds + 2));  // the fault's length, not a wait
  ASSERT_EQ(kill(etcd_->pid(), SIGCONT), 0);
  const absl::Status moved = move->Join();
  std::string outcome = "moved";
  if (!moved.ok()) {
    // Refused; once the group is whole again the operator runs the move again.
    EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition) << moved;
    const std::string group = WaitWhole("");
    ASSERT_FALSE(group.empty()) << "the group did not come back whole: " << DescribeShard0();
    outcome = absl::StrCat("refused, then ", group, "; rerun");
    LoadFor(200);
    move = std::make_unique<MoveThread>(etcd_->endpoint(), cluster_, "n3");
    const absl::Status again = move->Join();
    EXPECT_TRUE(again.ok()) << again;
  }
  const std::string group = WaitWhole("n3");
  EXPECT_FALSE(group.empty()) << "n3 is not the primary of a whole group: " << DescribeShard0();
  const std::string settled = absl::StrFormat("%.0f ms", (MonoNow() - fault) / 1e6);
  LoadFor(300);
  EXPECT_EQ(watch.Stop(), "");
  Verify(absl::StrCat("etcd paused ", kLeaseTtlSeconds + 2, " s mid-move (", seen, "): ", outcome),
         fault, settled);
}

// etcd paused for TTL + 2 s in the middle of a primary's hand-over, at one of its two steps:
// `kAsked`, at once after the move's own write of `handover_to` (n1 still primary, about to
// refuse writes and drain: the pause falls between the ask and n1's resignation by
// construction), or `kResigned`, as soon as a tight read of the map shows n1 resigned (no
// primary, n3 first in line) and before n3 claimed the role. The second window is a few
// milliseconds wide; a read that finds n3 already primary missed it, and the role is moved back
// to n1 and handed over again (at most 3 tries; the row says which try caught it). When etcd
// resumes every lease has lapsed at once; the nodes register again. Then the move (stepped by
// the test as `kvclient` steps it) runs on: it completes, or is refused (the primary called the
// hand-over off, or another backup took over first), undone and run again. Nothing
// acknowledged is lost, one primary per epoch, and the destination ends primary.
enum class HandOverStep { kAsked, kResigned };

class EtcdPausedMidHandOver : public ClusterFaultTest {
 protected:
  // Steps the move of shard 0's primary role to `to` until it has asked the primary to hand
  // over (true), or fails or runs out of 30 s (false).
  bool StepUntilAsked(cluster::ClusterMap* map, MoveRequest* req) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      absl::StatusOr<MoveStep> step = StepMove(map, req);
      if (!step.ok()) {
        ADD_FAILURE() << "move to " << req->to << ": " << step.status();
        return false;
      }
      if (absl::StrContains(step->said, "asks " + req->from + " to hand")) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "the move to " << req->to << " never asked for the hand-over";
    return false;
  }

  // After the ask: reads the map without pausing until the primary resigned. True when the
  // read saw the shard with no primary and `to` first in line (the window); false when `to`
  // already held the role or 10 s passed.
  bool WaitResigned(const std::string& to) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      const ClusterView v = View();
      if (v.shard_list.empty()) continue;
      const ShardInfo& s = v.shard_list[0];
      if (s.primary == to) return false;
      if (s.primary.empty() && !s.backups.empty() && s.backups[0] == to) return true;
    }
    return false;
  }

  // Moves the primary role to `to` and, at `at`, stops etcd: true once it did.
  bool PauseAt(HandOverStep at, cluster::ClusterMap* map, const std::string& to) {
    MoveRequest req;
    req.shard = 0;
    req.to = to;
    if (!StepUntilAsked(map, &req)) return false;
    if (at == HandOverStep::kResigned && !WaitResigned(to)) {
      // Missed the window: finish this move before the next try.
      EXPECT_TRUE(
          RunMove(map, req, absl::Seconds(40), absl::Milliseconds(50), [](const std::string&) {
          }).ok());
      return false;
    }
    EXPECT_EQ(kill(etcd_->pid(), SIGSTOP), 0);
    return true;
  }

  void Run(HandOverStep at) {
    StartTwoReplicasAndASpareUnderLoad(400);
    if (HasFatalFailure()) return;
    OnePrimaryPerEpoch watch(etcd_->endpoint(), cluster_);
    auto opened = cluster::EtcdClusterMap::Open(etcd_->endpoint(), cluster_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    cluster::ClusterMap* map = opened->get();
    int tries = 0;
    std::string to = "n3";
    bool paused = false;
    while (!paused && tries < 3) {
      ++tries;
      // Each missed try left the role on `to`: the next one moves it back to the other node.
      paused = PauseAt(at, map, to);
      if (!paused) to = to == "n3" ? "n1" : "n3";
      if (HasFailure()) return;
    }
    ASSERT_TRUE(paused) << "the window between the resignation and the claim was missed " << tries
                        << " times";
    const int64_t fault = MonoNow();
    absl::SleepFor(absl::Seconds(kLeaseTtlSeconds + 2));  // the fault's length, not a wait
    ASSERT_EQ(kill(etcd_->pid(), SIGCONT), 0);
    const std::string from = to == "n3" ? "n1" : "n3";
    MoveRequest req;
    req.shard = 0;
    req.to = to;
    req.from = from;
    req.primary = true;
    req.resolved = true;
    const auto quiet = [](const std::string&) {};
    absl::Status moved = RunMove(map, req, absl::Seconds(40), absl::Milliseconds(50), quiet);
    std::string outcome = "moved";
    if (!moved.ok()) {
      // Refused once the primary called the hand-over off (the destination was unregistered
      // when it looked) and undone: run it again, as the operator would.
      outcome = "undone, rerun";
      EXPECT_EQ(moved.code(), absl::StatusCode::kFailedPrecondition) << moved;
      WaitSettled(1, "", fault);
      LoadFor(200);
      MoveRequest again;
      again.shard = 0;
      again.to = to;
      moved = RunMove(map, again, absl::Seconds(40), absl::Milliseconds(50), quiet);
      EXPECT_TRUE(moved.ok()) << moved;
    }
    // Which node holds the backup role is not the move's to decide here: a lease lapse lets a
    // live backup take over and the group fill up again with whichever node joins first.
    const std::string settled = WaitSettled(1, "", fault);
    EXPECT_EQ(Primary(), to);
    LoadFor(300);
    EXPECT_EQ(watch.Stop(), "");
    const char* step = at == HandOverStep::kAsked ? "asked" : "resigned";
    Verify(absl::StrCat("etcd paused ", kLeaseTtlSeconds + 2, " s, hand-over ", step,
                        tries > 1 ? absl::StrCat(" (try ", tries, ")") : "", ": ", outcome),
           fault, settled);
  }
};

TEST_F(EtcdPausedMidHandOver, AsTheHandOverIsAsked) { Run(HandOverStep::kAsked); }

TEST_F(EtcdPausedMidHandOver, AfterThePrimaryResignedBeforeTheClaim) {
  Run(HandOverStep::kResigned);
}

// `kvclient cluster status` shows a state transfer in flight, read from the primary's
// /metrics: a node joining a shard of 2 MB sent at 1 MiB/s (--transfer_mib_s).
TEST_F(ClusterFaultTest, ClusterStatusShowsATransferInFlightWithItsEta) {
  extra_flags_ = {"--transfer_mib_s=1"};
  Init(2);
  StartNode("n1");
  ASSERT_TRUE(WaitServing(0));
  ClientOptions o;
  o.etcd = etcd_->endpoint();
  o.cluster = cluster_;
  o.auth_file = *auth_file_;
  o.user = testing::kTestClientUser;
  auto c = Client::Connect(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string value(2048, 'v');
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE((*c)->Put(absl::StrCat("k", i), value).ok());
  StartNode("n2");
  const std::vector<std::string> status = {"client/kvclient", "--etcd=" + etcd_->endpoint(),
                                           "--cluster=" + cluster_, "cluster", "status"};
  std::string table, json;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    table = testing::RunBinary(status[0], {status.begin() + 1, status.end()}, 20).out;
    if (absl::StrContains(table, "shard 0 n1 -> n2:")) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::printf("%s", table.c_str());  // what an operator sees (docs/cluster.md, "Progress")
  EXPECT_TRUE(absl::StrContains(table, "transfers in flight:\n  shard 0 n1 -> n2:")) << table;
  EXPECT_TRUE(absl::StrContains(table, " of 2.0 MiB (")) << table;
  std::vector<std::string> json_args(status.begin() + 1, status.end());
  json_args.push_back("--json");
  json = testing::RunBinary(status[0], json_args, 20).out;
  EXPECT_TRUE(
      absl::StrContains(json, "\"transfers\":[{\"shard\":0,\"from\":\"n1\",\"to\":\"n2\"") ||
      absl::StrContains(json, "\"transfers\":[]"))  // it may have ended meanwhile
      << json;
  ASSERT_TRUE(WaitServing(1));
  // Caught up: the primary's transfer series are gone.
  const std::string after =
      testing::RunBinary(status[0], {status.begin() + 1, status.end()}, 20).out;
  EXPECT_FALSE(absl::StrContains(after, "transfers in flight")) << after;
  // A move says how far its copy got while it runs.
  StartNode("n3");
  ASSERT_TRUE(WaitFor([](const ClusterView& v) { return v.IsLive("n3"); }, absl::Seconds(10)));
  const testing::Output move =
      testing::RunBinary(status[0],
                         {"--etcd=" + etcd_->endpoint(), "--cluster=" + cluster_, "cluster", "move",
                          "--shard=0", "--to=n3"},
                         60);
  std::printf("%s", move.out.c_str());
  EXPECT_EQ(move.exit_code, 0) << move.out << move.err;
  EXPECT_TRUE(absl::StrContains(move.out, "shard 0: n3 catching up: ")) << move.out;
  EXPECT_TRUE(absl::StrContains(move.out, " of 2.0 MiB (")) << move.out;
}

}  // namespace
}  // namespace unloadkv
