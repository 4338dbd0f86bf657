// pipeline_bench: one client keeping N requests in flight, GET and SET of fixed-size values,
// against unloadkv (the SDK's async calls) and Redis (hiredis pipelining), with the same driver
// for both: issue until N are outstanding, then wait for the oldest to complete, until `ops`
// completed. Prints one line per (system, operation, size, N): throughput and per-request
// latency p50/p99 (issue to completion).
//   pipeline_bench --unloadkv=127.0.0.1:7070 --redis=127.0.0.1:6379 [--ops=200000]
//                  [--depths=1,16,64] [--sizes=100,1024] [--keys=10000] [--csv=FILE]
//                  [--policy=adaptive[,inline:N]]
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gflags/gflags.h"
#include "transport/base/logging.h"
#include "transport/base/net.h"

DEFINE_string(unloadkv, "", "kvserver address host:port (empty: skip unloadkv)");
DEFINE_string(redis, "", "redis-server address host:port (empty: skip Redis)");
DEFINE_string(policy, "adaptive",
              "unloadkv's value path policy (ClientOptions::policy, e.g. adaptive,inline:4096)");
DEFINE_uint64(ops, 200000, "completed requests per (system, operation, size, depth)");
DEFINE_string(depths, "1,16,64", "requests in flight");
DEFINE_string(sizes, "100,1024", "value bytes");
DEFINE_uint64(keys, 10000, "key space (keys are preloaded for GETs)");
DEFINE_string(csv, "", "also write the results as CSV here");

namespace unloadkv {
namespace {

// What the driver needs from a store: issue a request (its completion is reported in order of
// issue for Redis, in any order for unloadkv), and block until at least one more completed.
class AsyncStore {
 public:
  virtual ~AsyncStore() = default;
  virtual void Issue(bool set, const std::string& key, const std::string& value) = 0;
  // Blocks until a request completes; returns its issue index, or -1 on an error (fatal).
  virtual int64_t Complete() = 0;
  virtual std::string error() const = 0;
};

class UnloadkvStore : public AsyncStore {
 public:
  explicit UnloadkvStore(std::unique_ptr<Client> c) : c_(std::move(c)) {}
  void Issue(bool set, const std::string& key, const std::string& value) override {
    const int64_t index = issued_++;
    // Requests issued while answers are at hand go out together, as hiredis's do (below).
    if (!batch_) batch_.emplace(c_->BeginBatch());
    if (set) {
      c_->PutAsync(key, value,
                   [this, index](absl::StatusOr<uint64_t> v) { Done(index, v.status()); });
    } else {
      c_->GetAsync(key, [this, index](absl::StatusOr<std::string> v) {
        Done(index, v.ok() || absl::IsNotFound(v.status()) ? absl::OkStatus() : v.status());
      });
    }
  }
  int64_t Complete() override {
    if (done_.empty()) {
      batch_.reset();  // flush what was issued, then wait for an answer
      c_->Wait([this] { return !done_.empty(); });
    }
    const int64_t index = done_.front();
    done_.pop_front();
    return index;
  }
  std::string error() const override { return error_; }

 private:
  void Done(int64_t index, const absl::Status& st) {
    if (!st.ok() && error_.empty()) error_ = std::string(st.message());
    done_.push_back(st.ok() ? index : -1);
  }
  std::unique_ptr<Client> c_;
  std::optional<Client::Batch> batch_;  // destroyed before c_
  int64_t issued_ = 0;
  std::deque<int64_t> done_;  // caller_progress: callbacks run on the waiting thread
  std::string error_;
};

class RedisStore : public AsyncStore {
 public:
  explicit RedisStore(redisContext* c) : c_(c) {}
  ~RedisStore() override { redisFree(c_); }
  void Issue(bool set, const std::string& key, const std::string& value) override {
    if (set) {
      const char* argv[] = {"SET", key.data(), value.data()};
      const size_t lens[] = {3, key.size(), value.size()};
      redisAppendCommandArgv(c_, 3, argv, lens);
    } else {
      const char* argv[] = {"GET", key.data()};
      const size_t lens[] = {3, key.size()};
      redisAppendCommandArgv(c_, 2, argv, lens);
    }
    ++issued_;
  }
  // redisGetReply returns an answer already read if there is one; only when there is none does
  // it write the commands appended so far (all in one write) and read.
  int64_t Complete() override {
    void* reply = nullptr;
    if (redisGetReply(c_, &reply) != REDIS_OK || reply == nullptr) {
      error_ = c_->errstr;
      return -1;
    }
    const bool bad = static_cast<redisReply*>(reply)->type == REDIS_REPLY_ERROR;
    if (bad) error_ = static_cast<redisReply*>(reply)->str;
    freeReplyObject(reply);
    return bad ? -1 : completed_++;
  }
  std::string error() const override { return error_; }

 private:
  redisContext* c_;
  int64_t issued_ = 0, completed_ = 0;
  std::string error_;
};

struct Result {
  double ops_per_s = 0, p50_us = 0, p99_us = 0;
};

// The one driver: keeps `depth` requests outstanding until `ops` completed.
absl::StatusOr<Result> Drive(AsyncStore& store, bool set, size_t size, int depth, uint64_t ops) {
  const std::string value(size, 'v');
  std::vector<absl::Time> issued_at;
  issued_at.reserve(ops + depth);
  std::vector<double> latency_us;
  latency_us.reserve(ops);
  uint64_t issued = 0, completed = 0, key = 0;
  const absl::Time start = absl::Now();
  while (completed < ops) {
    while (issued < ops && issued - completed < static_cast<uint64_t>(depth)) {
      issued_at.push_back(absl::Now());
      store.Issue(set, absl::StrCat("pipe", key++ % FLAGS_keys), value);
      ++issued;
    }
    const int64_t index = store.Complete();
    if (index < 0) return absl::UnavailableError(store.error());
    latency_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - issued_at[index]));
    ++completed;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::sort(latency_us.begin(), latency_us.end());
  Result r;
  r.ops_per_s = ops / seconds;
  r.p50_us = latency_us[latency_us.size() / 2];
  r.p99_us = latency_us[std::min(latency_us.size() - 1, latency_us.size() * 99 / 100)];
  return r;
}

std::vector<int> ParseList(const std::string& flag, const char* name) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    int v;
    if (!absl::SimpleAtoi(part, &v) || v < 1 || v > 65536) {
      std::fprintf(stderr, "pipeline_bench: --%s: '%s' is not a positive integer\n", name,
                   std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<AsyncStore>> Open(const std::string& system, int depth) {
  if (system == "unloadkv") {
    ClientOptions o;
    o.server = FLAGS_unloadkv;
    o.policy = FLAGS_policy;
    o.max_in_flight = std::max(depth, 1);
    o.caller_progress = true;
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    if (!c.ok()) return c.status();
    return std::unique_ptr<AsyncStore>(new UnloadkvStore(std::move(*c)));
  }
  absl::StatusOr<HostPort> hp = SplitHostPort(FLAGS_redis);
  if (!hp.ok()) return absl::InvalidArgumentError(absl::StrCat("--redis: ", hp.status().message()));
  redisContext* c = redisConnect(hp->host.c_str(), hp->port);
  if (c == nullptr || c->err) {
    std::string why = c ? c->errstr : "out of memory";
    if (c) redisFree(c);
    return absl::UnavailableError(absl::StrCat("redis at ", FLAGS_redis, ": ", why));
  }
  return std::unique_ptr<AsyncStore>(new RedisStore(c));
}

int Main() {
  const std::vector<int> depths = ParseList(FLAGS_depths, "depths");
  const std::vector<int> sizes = ParseList(FLAGS_sizes, "sizes");
  if (FLAGS_ops == 0 || FLAGS_keys == 0) {
    std::fprintf(stderr, "pipeline_bench: --ops and --keys must be positive\n");
    return 2;
  }
  std::vector<std::string> systems;
  if (!FLAGS_unloadkv.empty()) systems.push_back("unloadkv");
  if (!FLAGS_redis.empty()) systems.push_back("redis");
  if (systems.empty()) {
    std::fprintf(stderr, "pipeline_bench: name --unloadkv and/or --redis\n");
    return 2;
  }
  std::string csv = "system,op,value_bytes,in_flight,ops_per_s,p50_us,p99_us\n";
  std::printf("Pipelined: one client, N requests in flight, %llu requests each (measured)\n",
              static_cast<unsigned long long>(FLAGS_ops));
  std::printf("%-9s %-3s %6s %4s | %10s %9s %9s\n", "system", "op", "bytes", "N", "ops/s", "p50 us",
              "p99 us");
  for (int size : sizes) {
    for (const char* op : {"SET", "GET"}) {  // SETs first: the GETs then find their keys
      for (int depth : depths) {
        for (const std::string& system : systems) {
          absl::StatusOr<std::unique_ptr<AsyncStore>> store = Open(system, depth);
          if (!store.ok()) {
            std::fprintf(stderr, "pipeline_bench: %s\n", store.status().ToString().c_str());
            return 1;
          }
          absl::StatusOr<Result> r =
              Drive(**store, std::string(op) == "SET", static_cast<size_t>(size), depth, FLAGS_ops);
          if (!r.ok()) {
            std::fprintf(stderr, "pipeline_bench: %s %s: %s\n", system.c_str(), op,
                         r.status().ToString().c_str());
            return 1;
          }
          std::printf("%-9s %-3s %6d %4d | %10.0f %9.1f %9.1f\n", system.c_str(), op, size, depth,
                      r->ops_per_s, r->p50_us, r->p99_us);
          std::fflush(stdout);
          absl::StrAppend(&csv, system, ",", op, ",", size, ",", depth, ",", r->ops_per_s, ",",
                          r->p50_us, ",", r->p99_us, "\n");
        }
      }
    }
  }
  if (!FLAGS_csv.empty()) {
    FILE* f = std::fopen(FLAGS_csv.c_str(), "w");
    if (f == nullptr || std::fputs(csv.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "pipeline_bench: cannot write %s\n", FLAGS_csv.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace unloadkv

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  unloadkv::SetMinLogLevel(unloadkv::LogLevel::kWarning);  // not every closed connection
  return unloadkv::Main();
}
