// cluster_load: the fault matrix's client process. Threads write unique keys through the SDK
// (routed by the cluster map) and read back keys written before, logging every operation, one
// line each, flushed at once (so a SIGKILL leaves every completed line):
//   P <client> <key> <value> <invoke_ns> <response_ns|-> <code>
//   G <client> <key> <value|-> <invoke_ns> <response_ns|-> <code>
// Times are CLOCK_MONOTONIC (shared by the processes of one host). A write whose outcome is
// unknown (UNKNOWN, or a timeout) is logged with response "-". Runs until --ops operations per
// thread or SIGTERM.
#include <time.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gflags/gflags.h"
#include "transport/base/logging.h"

DEFINE_string(etcd, "", "etcd HOST:PORT");
DEFINE_string(cluster, "", "cluster name");
DEFINE_int32(threads, 4, "client threads (one operation at a time each)");
DEFINE_int32(ops, 1000000, "operations per thread");
DEFINE_string(prefix, "k", "key prefix (unique per run)");
DEFINE_double(read_fraction, 0.3, "share of operations that read a key written before");
DEFINE_string(policy, "adaptive", "path policy of the client's value writes");
DEFINE_string(auth_file, "", "auth file (kvserver's format) with the user to prove");
DEFINE_string(user, "", "the auth file's user (empty: its only one)");

namespace {

std::atomic<bool> g_stop{false};
void OnTerm(int) { g_stop.store(true); }

int64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::mutex g_out_mu;
void Emit(const std::string& line) {
  std::lock_guard<std::mutex> l(g_out_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

// Known outcome: the response time; unknown: "-".
std::string Response(const absl::Status& st, int64_t t) {
  const bool unknown = st.code() == absl::StatusCode::kUnknown ||
                       st.code() == absl::StatusCode::kDeadlineExceeded ||
                       st.code() == absl::StatusCode::kUnavailable;
  return unknown ? "-" : absl::StrCat(t);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kError);
  std::signal(SIGTERM, OnTerm);
  std::signal(SIGPIPE, SIG_IGN);
  unloadkv::ClientOptions o;
  o.etcd = FLAGS_etcd;
  o.cluster = FLAGS_cluster;
  o.failover_timeout = absl::Seconds(20);
  o.policy = FLAGS_policy;
  o.auth_file = FLAGS_auth_file;
  o.user = FLAGS_user;
  auto client = unloadkv::Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "cluster_load: %s\n", client.status().ToString().c_str());
    return 1;
  }
  unloadkv::Client& c = **client;
  Emit("READY\n");
  std::vector<std::thread> threads;
  for (int t = 0; t < FLAGS_threads; ++t) {
    threads.emplace_back([&c, t] {
      std::mt19937_64 rng(t + 1);
      std::vector<std::string> written;
      for (int i = 0; i < FLAGS_ops && !g_stop.load(); ++i) {
        if (!written.empty() &&
            std::uniform_real_distribution<double>(0, 1)(rng) < FLAGS_read_fraction) {
          const std::string& key = written[rng() % written.size()];
          const int64_t t0 = Now();
          absl::StatusOr<std::string> v = c.Get(key);
          const int64_t t1 = Now();
          const std::string value = v.ok() ? *v : "-";
          Emit(absl::StrCat("G ", t, " ", key, " ", value, " ", t0, " ", Response(v.status(), t1),
                            " ", absl::StatusCodeToString(v.status().code()), "\n"));
          continue;
        }
        const std::string key = absl::StrCat(FLAGS_prefix, "-", t, "-", i);
        const std::string value = absl::StrCat("v", i, "x", rng() % 1000000);
        const int64_t t0 = Now();
        absl::Status st = c.Put(key, value);
        const int64_t t1 = Now();
        Emit(absl::StrCat("P ", t, " ", key, " ", value, " ", t0, " ", Response(st, t1), " ",
                          absl::StatusCodeToString(st.code()), "\n"));
        written.push_back(key);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  return 0;
}
