#include "client/ycsb/runner.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace unloadkv::ycsb {
namespace {

std::string ReturnCode(const absl::Status& st) {
  if (st.ok()) return "OK";
  if (st.code() == absl::StatusCode::kNotFound) return "NOT_FOUND";
  return "ERROR";
}

constexpr int kOps = 5;

// `d` as a whole number of `unit`s.
int64_t InUnits(absl::Duration d, absl::Duration unit) {
  absl::Duration rest;
  return absl::IDivDuration(d, unit, &rest);
}

struct Shared {
  std::atomic<uint64_t> done{0};
  // Status lines printed by the client threads (RunOptions::run_threads): under mu. They are
  // paced in real time (a simulated run covers milliseconds of its clock) and report on
  // options.clock.
  std::mutex mu;
  absl::Time next_status;  // real time
  uint64_t last_done = 0;
  absl::Time last_t;
  std::atomic<uint64_t> count[kOps] = {};
  std::atomic<uint64_t> sum_us[kOps] = {};
  std::atomic<bool> finished{false};
};

// Performs one operation of kind `op`; `load_key` is the key number of a load-phase insert. A
// read-modify-write records its READ and UPDATE parts in `m` itself.
absl::Status DoOp(Op op, bool load, uint64_t load_key, Db& db, Workload& w, Workload::Thread& gen,
                  Measurements& m, const Clock& clock, absl::Duration unit) {
  switch (op) {
    case Op::kRead: {
      Record r;
      return db.Read(w.KeyName(gen.NextKeyNumber()), gen.ReadFields(), &r);
    }
    case Op::kUpdate:
      return db.Update(w.KeyName(gen.NextKeyNumber()), gen.BuildUpdate());
    case Op::kInsert: {
      const uint64_t n = load ? load_key : w.insert_sequence().Next();
      absl::Status st = db.Insert(w.KeyName(n), gen.BuildRecord());
      if (!load) w.insert_sequence().Acknowledge(n);
      return st;
    }
    case Op::kScan: {
      std::vector<Record> rs;
      return db.Scan(w.KeyName(gen.NextKeyNumber()), gen.NextScanLength(), gen.ReadFields(), &rs);
    }
    case Op::kReadModifyWrite: {
      const std::string key = w.KeyName(gen.NextKeyNumber());
      Record r;
      const absl::Time r0 = clock.Now();
      absl::Status st = db.Read(key, gen.ReadFields(), &r);
      const absl::Time r1 = clock.Now();
      m.Record("READ", InUnits(r1 - r0, unit), ReturnCode(st));
      if (st.ok()) {
        st = db.Update(key, gen.BuildUpdate());
        m.Record("UPDATE", InUnits(clock.Now() - r1, unit), ReturnCode(st));
      }
      return st;
    }
  }
  return absl::InternalError("unknown operation");
}

std::string StatusLine(const Shared& shared, uint64_t total, absl::Time start, absl::Time now,
                       uint64_t done, uint64_t last, absl::Time last_t);

// One client thread: `count` operations (in the load phase, inserts of keys from `first`),
// paced to `rate` operations a second when it is positive, measured into `m` and `shared`.
void RunThread(Workload& w, const RunOptions& o, Db& db, int t, uint64_t count, uint64_t first,
               uint64_t total, absl::Time start, Measurements& m, Shared& shared) {
  Workload::Thread gen(&w, o.seed * 1000003 + t);
  const double rate = o.target_ops > 0 ? o.target_ops / o.threads : 0;
  const Clock& clock = *o.clock;
  for (uint64_t i = 0; i < count; ++i) {
    absl::Time intended = clock.Now();
    if (rate > 0) {
      intended = start + absl::Seconds(i / rate);
      absl::Duration wait = intended - clock.Now();
      if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
    }
    const absl::Time t0 = clock.Now();
    const Op op = o.load ? Op::kInsert : gen.NextOp();
    const absl::Status st =
        DoOp(op, o.load, w.config().insert_start + first + i, db, w, gen, m, clock, o.latency_unit);
    const absl::Time t1 = clock.Now();
    const int64_t us = absl::ToInt64Microseconds(t1 - t0);
    m.Record(OpName(op), InUnits(t1 - t0, o.latency_unit), ReturnCode(st));
    if (rate > 0) {
      m.RecordIntended(OpName(op), InUnits(t1 - intended, o.latency_unit));
    }
    const int k = static_cast<int>(op);
    shared.count[k].fetch_add(1, std::memory_order_relaxed);
    shared.sum_us[k].fetch_add(us, std::memory_order_relaxed);
    const uint64_t done = shared.done.fetch_add(1, std::memory_order_relaxed) + 1;
    if (o.run_threads && o.status != nullptr && o.status_interval_s > 0) {
      std::lock_guard<std::mutex> l(shared.mu);
      if (absl::Now() >= shared.next_status) {
        std::fprintf(
            o.status, "%s\n",
            StatusLine(shared, total, start, t1, done, shared.last_done, shared.last_t).c_str());
        std::fflush(o.status);
        shared.last_done = done;
        shared.last_t = t1;
        shared.next_status = absl::Now() + absl::Seconds(o.status_interval_s);
      }
    }
  }
}

// One status line, as YCSB's StatusThread prints it: `done` operations by `now`, `last` of
// them by `last_t`, of `total`.
std::string StatusLine(const Shared& shared, uint64_t total, absl::Time start, absl::Time now,
                       uint64_t done, uint64_t last, absl::Time last_t) {
  const double cur = (done - last) / absl::ToDoubleSeconds(now - last_t);
  std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%d %H:%M:%E3S", now, absl::LocalTimeZone()), " ",
                   static_cast<int64_t>(absl::ToDoubleSeconds(now - start)), " sec: ", done,
                   " operations; ", JavaDouble(cur), " current ops/sec;");
  if (done > 0 && done < total) {
    const double left_s = (total - done) * absl::ToDoubleSeconds(now - start) / done;
    absl::StrAppend(&line, " est completion in ", static_cast<int64_t>(left_s), " seconds");
  }
  for (int k = 0; k < kOps; ++k) {
    const uint64_t n = shared.count[k].load();
    if (n == 0) continue;
    absl::StrAppend(&line, " [", OpName(static_cast<Op>(k)), ": Count=", n,
                    ", Avg=", JavaDouble(static_cast<double>(shared.sum_us[k].load()) / n), "]");
  }
  return line;
}

}  // namespace

absl::StatusOr<RunResult> RunPhase(Workload& w, const RunOptions& o, const DbFactory& connect) {
  if (o.threads < 1 || o.threads > 1024) {
    return absl::InvalidArgumentError("threads must be in 1..1024");
  }
  const WorkloadConfig& c = w.config();
  const uint64_t total = o.load ? c.insert_count : c.operation_count;
  // Connect every thread first, so a bad address fails before anything runs.
  std::vector<std::unique_ptr<Db>> dbs;
  for (int t = 0; t < o.threads; ++t) {
    auto db = connect();
    if (!db.ok()) return db.status();
    dbs.push_back(std::move(*db));
  }
  Shared shared;
  std::vector<Measurements> per_thread(o.threads);
  const absl::Time start = o.clock->Now();
  shared.last_t = start;
  shared.next_status = absl::Now() + absl::Seconds(o.status_interval_s);
  std::vector<std::function<void()>> bodies;
  for (int t = 0; t < o.threads; ++t) {
    const uint64_t mine = total / o.threads + (static_cast<uint64_t>(t) < total % o.threads);
    const uint64_t first = (total / o.threads) * t + std::min<uint64_t>(t, total % o.threads);
    bodies.push_back([&, t, mine, first] {
      RunThread(w, o, *dbs[t], t, mine, first, total, start, per_thread[t], shared);
    });
  }
  if (o.run_threads) {
    if (absl::Status st = o.run_threads(std::move(bodies)); !st.ok()) return st;
    RunResult r;
    r.runtime = o.clock->Now() - start;
    r.runtime_ms = absl::ToInt64Milliseconds(r.runtime);
    r.operations = shared.done.load();
    for (const Measurements& m : per_thread) r.measurements.Add(m);
    return r;
  }
  std::vector<std::thread> threads;
  for (std::function<void()>& body : bodies) threads.emplace_back(std::move(body));
  // Status lines, as YCSB's StatusThread prints them (-s).
  std::mutex mu;
  std::condition_variable cv;
  std::thread status([&] {
    if (o.status == nullptr || o.status_interval_s <= 0) return;
    uint64_t last = 0;
    absl::Time last_t = start;
    std::unique_lock<std::mutex> l(mu);
    while (!cv.wait_for(l,
                        std::chrono::milliseconds(static_cast<int64_t>(o.status_interval_s * 1000)),
                        [&] { return shared.finished.load(); })) {
      const absl::Time now = o.clock->Now();
      const uint64_t done = shared.done.load();
      std::fprintf(o.status, "%s\n",
                   StatusLine(shared, total, start, now, done, last, last_t).c_str());
      std::fflush(o.status);
      last = done;
      last_t = now;
    }
  });
  for (std::thread& th : threads) th.join();
  const absl::Time end = o.clock->Now();
  {
    std::lock_guard<std::mutex> l(mu);
    shared.finished = true;
    cv.notify_all();
  }
  status.join();
  RunResult r;
  r.runtime = end - start;
  r.runtime_ms = absl::ToInt64Milliseconds(r.runtime);
  r.operations = shared.done.load();
  for (const Measurements& m : per_thread) r.measurements.Add(m);
  return r;
}

}  // namespace unloadkv::ycsb
