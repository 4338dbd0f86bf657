#include "transport/bench/writebench_run.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "transport/backends/open_device.h"
#include "transport/bench/writebench_flags.h"
#include "transport/engine/engine.h"
#include "transport/sim/fabric.h"

namespace unloadkv::bench {

bool Modeled() { return FLAGS_fabric == "sim"; }
int StagingLanes() { return FLAGS_staging_lanes > 0 ? FLAGS_staging_lanes : FLAGS_unload_workers; }

namespace {

// An upper bound for policies that split by page heat, on zipfian writes: it knows the
// workload (which no engine policy may), offloads the 4 KiB pages holding the K most frequent
// items and unloads the rest. Not thread-safe (one connection).
class OraclePolicy : public engine::PathPolicy {
 public:
  OraclePolicy(uint64_t k, uint64_t working_set, uint32_t write_size, uint64_t base) : base_(base) {
    const uint64_t items = std::max<uint64_t>(1, working_set / write_size);
    for (uint64_t rank = 0; rank < k; ++rank) {
      hot_pages_.insert(ZipfianGenerator::Scramble(rank, items) * write_size >> 12);
    }
  }
  absl::string_view name() const override { return "oracle"; }
  engine::Decision Decide(uint64_t remote_addr, uint32_t, bool unload_possible) override {
    if (!unload_possible || hot_pages_.contains((remote_addr - base_) >> 12)) {
      return {engine::Path::kOffload, 0};
    }
    return {engine::Path::kUnload, 0};
  }

 private:
  uint64_t base_;
  absl::flat_hash_set<uint64_t> hot_pages_;
};

}  // namespace

absl::StatusOr<std::optional<uint64_t>> ParseOracle(absl::string_view name, Pattern pattern) {
  if (!absl::ConsumePrefix(&name, "oracle:")) return std::optional<uint64_t>();
  uint64_t k = 0;
  if (!absl::SimpleAtoi(name, &k) || k < 1 || k > 1000000) {
    return absl::InvalidArgumentError("oracle:K needs 1 <= K <= 1000000");
  }
  if (pattern != Pattern::kZipfian) {
    return absl::InvalidArgumentError("oracle:K is defined for --pattern=zipfian only");
  }
  return std::optional<uint64_t>(k);
}

namespace {

absl::StatusOr<std::unique_ptr<engine::PathPolicy>> MakeBenchPolicy(const Point& pt,
                                                                    uint64_t base) {
  absl::StatusOr<std::optional<uint64_t>> oracle = ParseOracle(pt.policy, pt.pattern);
  if (!oracle.ok()) return oracle.status();
  if (oracle->has_value()) {
    return std::unique_ptr<engine::PathPolicy>(
        new OraclePolicy(**oracle, pt.working_set, pt.write_size, base));
  }
  return engine::MakePolicy(pt.policy);
}

// The two nodes of a point: on the simulated fabric (created in *fabric), or two soft or verbs
// devices.
absl::Status OpenDevices(std::unique_ptr<sim::Fabric>* fabric, std::unique_ptr<rnic::Device>* a,
                         std::unique_ptr<rnic::Device>* b) {
  if (FLAGS_fabric == "sim") {
    *fabric = std::make_unique<sim::Fabric>();
    *a = (*fabric)->CreateDevice();
    *b = (*fabric)->CreateDevice();
    return absl::OkStatus();
  }
  if (FLAGS_fabric == "soft" || FLAGS_fabric == "verbs") {
    // verbs: both nodes on the first active RNIC (loopback through the NIC); real two-host
    // runs use the KV service. Without a device this fails with the reason and the fix.
    backends::DeviceSpec spec;
    spec.transport = FLAGS_fabric;
    spec.soft_flag = "--fabric=soft";
    auto da = backends::OpenDevice(spec);
    if (!da.ok()) return da.status();
    auto db = backends::OpenDevice(spec);
    if (!db.ok()) return db.status();
    *a = std::move(*da);
    *b = std::move(*db);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--fabric='", FLAGS_fabric, "': choose sim, soft or verbs"));
}

// Fills `r` from the latencies and paths of a point's writes (the first FLAGS_warmup are not
// counted) and the time the measured ones took.
void Summarize(const Point& pt, const std::vector<double>& lat,
               const std::vector<uint8_t>& unloaded, absl::Duration measured, Result* r) {
  const int64_t total = static_cast<int64_t>(lat.size());
  r->ops = FLAGS_ops;
  r->latencies_us.assign(lat.begin() + FLAGS_warmup, lat.end());
  std::vector<double> sorted = r->latencies_us;
  std::sort(sorted.begin(), sorted.end());
  r->mean_us = std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
  r->p50_us = sorted[sorted.size() / 2];
  r->p99_us = sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)];
  const double secs = absl::ToDoubleSeconds(measured);
  r->ops_per_s = secs > 0 ? FLAGS_ops / secs : 0;
  r->gbps = r->ops_per_s * pt.write_size / 1e9;
  r->unload_fraction =
      std::accumulate(unloaded.begin() + FLAGS_warmup, unloaded.end(), 0.0) / FLAGS_ops;
  double sum[2] = {0, 0};
  int64_t n[2] = {0, 0};
  for (int64_t i = FLAGS_warmup; i < total; ++i) {
    sum[unloaded[i]] += lat[i];
    ++n[unloaded[i]];
  }
  for (int p = 0; p < 2; ++p) r->path_mean_us[p] = n[p] > 0 ? sum[p] / n[p] : 0;
}

// With --trace, appends one line per measured write: policy, index, path, latency.
absl::Status AppendTrace(const Point& pt, const std::vector<double>& lat,
                         const std::vector<uint8_t>& unloaded) {
  if (FLAGS_trace.empty()) return absl::OkStatus();
  std::ofstream trace(FLAGS_trace, std::ios::app);
  for (int64_t i = FLAGS_warmup; i < static_cast<int64_t>(lat.size()); ++i) {
    trace << pt.policy << ' ' << i - FLAGS_warmup << ' ' << (unloaded[i] ? "unload" : "offload")
          << ' ' << lat[i] << '\n';
  }
  if (!trace) return absl::InvalidArgumentError("--trace: cannot write " + FLAGS_trace);
  return absl::OkStatus();
}

// Admits a staged write only inside the one window bound for its connection (kvserver's
// ConnectionGrants does the same per slot, with a hash lookup). Immutable: thread-safe.
class WindowCheck : public engine::StagedWriteCheck {
 public:
  WindowCheck(uint32_t rkey, uint64_t addr, uint64_t length)
      : rkey_(rkey), addr_(addr), length_(length) {}
  rnic::AccessVerdict Check(uint32_t rkey, uint64_t addr, uint64_t length) const override {
    if (rkey != rkey_) return rnic::AccessVerdict::kUnknownKey;
    if (addr < addr_ || addr - addr_ > length_ || length > length_ - (addr - addr_)) {
      return rnic::AccessVerdict::kOutOfBounds;
    }
    return rnic::AccessVerdict::kOk;
  }

 private:
  const uint32_t rkey_;
  const uint64_t addr_, length_;
};

// --memory_protection: binds a window over all of `dst` on each target connection (the peer of
// the initiator at the same index) and installs its check; returns each connection's key once
// every bind completed. The windows go to *windows, which must outlive the connections.
absl::StatusOr<std::vector<uint32_t>> BindTargetWindows(
    sim::Fabric* fabric, engine::Engine& ea, engine::Engine& eb, const rnic::MemoryRegion& dst,
    std::vector<std::unique_ptr<engine::Connection>>& targets,
    std::vector<std::unique_ptr<rnic::MemoryWindow>>* windows) {
  // Shared with the callbacks: an early return may leave binds in flight.
  auto bound = std::make_shared<std::atomic<int>>(0);
  auto failed = std::make_shared<std::atomic<int>>(0);
  std::vector<uint32_t> keys;
  for (auto& target : targets) {
    absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> w = eb.device()->AllocateWindow();
    if (!w.ok()) return w.status();
    windows->push_back(std::move(*w));
    rnic::MemoryWindow* window = windows->back().get();
    engine::WindowGrant g{window, &dst, dst.address(), dst.length()};
    absl::Status st = target->BindWindows(
        {&g, 1}, [bound, failed](absl::Status s) { (s.ok() ? *bound : *failed).fetch_add(1); });
    if (!st.ok()) return st;
    target->SetStagedWriteCheck(
        std::make_shared<WindowCheck>(window->rkey(), dst.address(), dst.length()));
    keys.push_back(window->rkey());
  }
  // The engines are not started yet: drive them here (bounded: a bind completes in
  // microseconds, modeled or real).
  for (int spins = 0; *bound + *failed < static_cast<int>(targets.size()); ++spins) {
    if (spins > 10000000) return absl::DeadlineExceededError("window binds did not complete");
    if (ea.PollOnce() + eb.PollOnce() == 0 && fabric != nullptr) fabric->Run(int64_t{1} << 40);
  }
  if (*failed > 0) return absl::InternalError("a window bind failed");
  return keys;
}

}  // namespace

// Runs one point: two nodes, one connection, a closed loop with FLAGS_window writes in flight.
// Longer than our usual 80 lines on purpose: the loop's issue function, its completion
// callback and the two ways of driving it (virtual time, worker threads) share the loop's
// counters and buffers; read whole, the measurement's order of events is visible at once.
absl::StatusOr<Result> RunPoint(const Point& pt) {
  std::unique_ptr<sim::Fabric> fabric;
  std::unique_ptr<rnic::Device> dev_a, dev_b;
  if (absl::Status st = OpenDevices(&fabric, &dev_a, &dev_b); !st.ok()) return st;
  engine::CountingMetrics metrics;
  engine::EngineOptions opts;
  opts.staging_slot_bytes = std::max<uint32_t>(16 << 10, pt.write_size + 64);
  opts.unload_workers = FLAGS_unload_workers;
  opts.staging_lanes = StagingLanes();
  opts.metrics = &metrics;
  opts.share_target_models = FLAGS_shared_target_model;
  opts.modeled_huge_pages = fabric != nullptr;  // the modeled nodes have huge pages
  auto ea = engine::Engine::Create(dev_a.get(), opts);
  auto eb = engine::Engine::Create(dev_b.get(), opts);
  if (!ea.ok()) return ea.status();
  if (!eb.ok()) return eb.status();
  // The target's working set: reserved, touched only where written.
  // At the same address every run (a hint the kernel takes when the range is free): the
  // adaptive policy hashes page addresses into its heat sketch, so with the address varying
  // (ASLR) the same seed gave different modeled results.
  void* const kArenaHint = reinterpret_cast<void*>(uintptr_t{0x500000000000});
  void* arena = mmap(kArenaHint, pt.working_set, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (arena == MAP_FAILED) return absl::ResourceExhaustedError("mmap of the working set failed");
  // Unmapped on every return, after the regions registered on it are gone.
  struct Unmap {
    void* addr;
    size_t length;
    ~Unmap() { munmap(addr, length); }
  } unmap{arena, pt.working_set};
  std::vector<char> src(size_t{pt.write_size} * FLAGS_window, 'w');
  absl::Status status;
  Result r;
  r.point = pt;
  {
    auto dst_mr = (*eb)->RegisterMemory(
        arena, pt.working_set,
        rnic::kLocalWrite | (FLAGS_memory_protection ? rnic::kMwBind : rnic::kRemoteWrite));
    auto src_mr = (*ea)->RegisterMemory(src.data(), src.size(), rnic::kLocalWrite);
    if (!dst_mr.ok() || !src_mr.ok()) return !dst_mr.ok() ? dst_mr.status() : src_mr.status();
    // Each connection has its own policy; writes go round-robin, or with --connection_writes
    // to one connection after another (each opened at its first write, closed after its last
    // completed).
    const int64_t total = FLAGS_warmup + FLAGS_ops;
    const int64_t per_conn = FLAGS_connection_writes;
    const int nconn =
        per_conn > 0 ? static_cast<int>((total + per_conn - 1) / per_conn) : FLAGS_connections;
    std::vector<std::unique_ptr<rnic::MemoryWindow>> windows;  // outlive the connections
    std::vector<std::unique_ptr<engine::Connection>> initiators(nconn), targets(nconn);
    auto open = [&](int k) -> absl::Status {
      absl::StatusOr<std::unique_ptr<engine::PathPolicy>> p =
          MakeBenchPolicy(pt, (*dst_mr)->address());
      if (!p.ok()) return p.status();
      auto ca = (*ea)->CreateConnection(std::move(*p));
      auto cb = (*eb)->CreateConnection(std::make_unique<engine::OffloadPolicy>());
      if (!ca.ok() || !cb.ok()) return !ca.ok() ? ca.status() : cb.status();
      if (auto st = (*ca)->Connect((*cb)->local_info()); !st.ok()) return st;
      if (auto st = (*cb)->Connect((*ca)->local_info()); !st.ok()) return st;
      initiators[k] = std::move(*ca);
      targets[k] = std::move(*cb);
      return absl::OkStatus();
    };
    for (int k = 0; k < (per_conn > 0 ? 1 : nconn); ++k) {
      if (absl::Status st = open(k); !st.ok()) return st;
    }
    // The key each connection writes with: the region's, or its own window's.
    std::vector<uint32_t> rkeys(nconn, (*dst_mr)->rkey());
    if (FLAGS_memory_protection) {
      auto keys = BindTargetWindows(fabric.get(), **ea, **eb, **dst_mr, targets, &windows);
      if (!keys.ok()) return keys.status();
      rkeys = std::move(*keys);
    }
    std::vector<int64_t> conn_done(nconn, 0);  // completed writes per connection
    AddressStream addrs(pt.pattern, pt.working_set, pt.write_size, FLAGS_seed,
                        std::max<int64_t>(1, total / 4));
    std::vector<double> lat(total, 0);
    std::vector<uint8_t> unloaded(total, 0);
    std::mutex mu;
    std::condition_variable cv;
    int64_t issued = 0, completed = 0, failed = 0;
    absl::Time measure_start, measure_end;
    const Clock& clock = (*ea)->clock();
    auto issue = [&](int64_t i) {
      uint64_t off = addrs.Next();
      if (i == FLAGS_warmup) measure_start = clock.Now();
      size_t slot = size_t(i % FLAGS_window) * pt.write_size;
      const int k = static_cast<int>(per_conn > 0 ? i / per_conn : i % nconn);
      if (initiators[k] == nullptr) {
        if (absl::Status st = open(k); !st.ok()) return st;
      }
      return initiators[k]->Write((*src_mr)->Sge(slot, pt.write_size),
                                  (*dst_mr)->address() + off, rkeys[k],
                                  [&, i, k](const engine::WriteResult& w) {
                                    std::lock_guard<std::mutex> l(mu);
                                    lat[i] = absl::ToDoubleMicroseconds(w.latency);
                                    unloaded[i] = w.path == engine::Path::kUnload;
                                    failed += !w.ok();
                                    ++conn_done[k];
                                    if (++completed == total) measure_end = clock.Now();
                                    cv.notify_one();
                                  });
    };
    // --connection_writes: closes the connections whose writes all completed (virtual time
    // only, where no worker thread runs their callbacks meanwhile).
    int closed = 0;
    auto close_done = [&] {
      while (per_conn > 0 && closed < nconn && initiators[closed] != nullptr &&
             conn_done[closed] == std::min(per_conn, total - closed * per_conn)) {
        initiators[closed].reset();
        targets[closed].reset();
        ++closed;
      }
    };
    if (fabric) {
      while (true) {
        {
          std::lock_guard<std::mutex> l(mu);
          if (completed == total || failed > 0) break;
        }
        while (issued < total && issued - completed < FLAGS_window && status.ok()) {
          status = issue(issued++);
        }
        if (!status.ok()) break;
        close_done();
        if ((*ea)->PollOnce() + (*eb)->PollOnce() == 0) {
          if (fabric->idle()) {
            status = absl::InternalError("simulation stalled with writes outstanding");
            break;
          }
          fabric->Run(int64_t{1} << 40);
        }
      }
    } else {
      (*ea)->Start();
      (*eb)->Start();
      std::unique_lock<std::mutex> l(mu);
      while (completed < total && failed == 0 && status.ok()) {
        while (issued < total && issued - completed < FLAGS_window && status.ok()) {
          l.unlock();
          status = issue(issued++);
          l.lock();
        }
        cv.wait_for(l, std::chrono::milliseconds(100));
      }
      l.unlock();
      (*ea)->Stop();
      (*eb)->Stop();
    }
    if (status.ok() && failed > 0) {
      status = absl::InternalError(absl::StrCat(failed, " writes failed"));
    }
    if (status.ok()) {
      const absl::Duration measured = measure_end - measure_start;
      Summarize(pt, lat, unloaded, measured, &r);
      status = AppendTrace(pt, lat, unloaded);
      if (fabric) r.mtt_misses = sim::StatsOf(*dev_b).mtt_misses;
    }
  }
  if (!status.ok()) return status;
  return r;
}

}  // namespace unloadkv::bench
