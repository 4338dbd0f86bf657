#include "client/client.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "proto/limits.h"
#include "transport/backends/open_device.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv {

// Grants of one size class. Puts that find the pool empty wait in `waiters` while one GRANT
// request is outstanding for the class.
struct Client::Grants {
  std::vector<proto::SlotGrant> pool;
  std::deque<std::function<void(absl::StatusOr<proto::SlotGrant>)>> waiters;
  bool requesting = false;
};

class Client::WriteCount : public engine::EngineMetrics {
 public:
  explicit WriteCount(engine::EngineMetrics* next) : next_(next) {}
  void OnWriteCompleted(engine::Path path, uint32_t bytes, absl::Duration latency,
                        bool ok) override {
    (ok ? writes_[static_cast<int>(path)] : errors_).fetch_add(1, std::memory_order_relaxed);
    if (next_) next_->OnWriteCompleted(path, bytes, latency, ok);
  }
  void OnValidationFailure(engine::ValidationFailure r) override {
    if (next_) next_->OnValidationFailure(r);
  }
  void OnStagedWriteApplied(uint32_t bytes) override {
    if (next_) next_->OnStagedWriteApplied(bytes);
  }
  void OnRingOccupancy(uint32_t used, uint32_t cap) override {
    if (next_) next_->OnRingOccupancy(used, cap);
  }
  void OnPolicySwitch() override {
    if (next_) next_->OnPolicySwitch();
  }
  WriteStats stats() const { return {writes_[0].load(), writes_[1].load(), errors_.load()}; }

 private:
  engine::EngineMetrics* next_;
  std::atomic<uint64_t> writes_[2] = {};
  std::atomic<uint64_t> errors_{0};
};

namespace {

constexpr uint32_t kGrantBatch = 16;

// The state of one synchronous call: the callback fills it under the mutex; the waiter reads
// it after Client::Wait saw `done`, taking the mutex so the callback has finished with it.
template <typename T>
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::optional<T> result;
};

bool Transient(const absl::Status& st, bool idempotent) {
  return st.code() == absl::StatusCode::kResourceExhausted ||
         (idempotent && st.code() == absl::StatusCode::kDeadlineExceeded);
}

template <typename T, typename Fn>
T WithRetries(int max_retries, bool idempotent, Fn fn) {
  T r = fn();
  for (int attempt = 0; attempt < max_retries; ++attempt) {
    absl::Status st;
    if constexpr (std::is_same_v<T, absl::Status>) {
      st = r;
    } else {
      st = r.status();
    }
    if (st.ok() || !Transient(st, idempotent)) break;
    absl::SleepFor(absl::Milliseconds(1 << attempt));
    r = fn();
  }
  return r;
}

// Errors are moved, never copied, from the engine thread that made them to the caller: a
// non-OK absl::Status shares a reference-counted rep, and Debian's Abseil is not built with
// TSan, so a rep referenced from two threads and released inside the library looks like a race
// to TSan. With one owner at a time there is nothing to misreport.
template <typename Resp>
absl::StatusOr<Resp> Parse(absl::StatusOr<std::string> bytes) {
  if (!bytes.ok()) return std::move(bytes).status();
  Resp r;
  if (!r.ParseFromString(*bytes)) return absl::InternalError("server response does not parse");
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.max_in_flight < 1 || options.max_in_flight > 1024) {
    return absl::InvalidArgumentError("max_in_flight must be in 1..1024");
  }
  auto policy = engine::MakePolicy(options.policy);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<Client> c(new Client());
  c->options_ = options;
  backends::DeviceSpec spec;
  spec.transport = options.transport;
  spec.soft_host = options.soft_host;
  spec.verbs_device = options.verbs_device;
  auto device = backends::OpenDevice(spec);
  if (!device.ok()) return device.status();
  c->device_ = std::move(*device);
  c->write_count_ = std::make_unique<WriteCount>(options.metrics);
  engine::EngineOptions eo;
  eo.max_message_bytes = proto::kMaxMessageBytes;
  eo.metrics = c->write_count_.get();
  auto engine = engine::Engine::Create(c->device_.get(), eo);
  if (!engine.ok()) return engine.status();
  c->engine_ = std::move(*engine);
  // Twice the requests in flight: a buffer is held until its write completes, which may be
  // after the PUT that follows it was answered.
  const size_t buffers = 2 * static_cast<size_t>(options.max_in_flight);
  c->buffers_ = std::make_unique<MappedMemory>(buffers * proto::kMaxValueBytes, false);
  if (c->buffers_->data() == nullptr) return absl::ResourceExhaustedError("value buffers: mmap");
  auto mr = c->engine_->RegisterMemory(c->buffers_->data(), c->buffers_->size(), rnic::kLocalWrite);
  if (!mr.ok()) return mr.status();
  c->buffers_mr_ = std::move(*mr);
  for (uint32_t i = 0; i < buffers; ++i) c->free_buffers_.push_back(i);
  for (int i = 0; i < proto::kSlotClasses; ++i) c->grants_.push_back(std::make_unique<Grants>());

  auto conn = c->engine_->CreateConnection(std::move(*policy));
  if (!conn.ok()) return conn.status();
  c->conn_ = std::move(*conn);
  c->rpc_ =
      std::make_unique<rpc::RpcClient>(c->conn_.get(), RealClock::Get(), options.max_in_flight);
  // One deadline for the whole of Connect: the bootstrap exchange and the first round trip.
  const absl::Time deadline = absl::Now() + options.timeout;
  auto answer = rpc::ExchangeAsClient(
      options.server, engine::EncodeConnectionInfo(c->conn_->local_info()), options.timeout);
  if (!answer.ok()) {
    return absl::Status(answer.status().code(),
                        absl::StrCat("connecting to kvserver at ", options.server, ": ",
                                     answer.status().message()));
  }
  auto remote = engine::DecodeConnectionInfo(*answer);
  if (!remote.ok()) return remote.status();
  if (absl::Status st = c->conn_->Connect(*remote); !st.ok()) return st;
  if (!options.caller_progress) c->engine_->Start();
  Client* self = c.get();
  c->ticker_ = std::thread([self] {
    while (!self->stop_.load()) {
      absl::SleepFor(absl::Milliseconds(5));
      self->rpc_->CheckDeadlines();
    }
  });
  // The first message proves the data path both ways (the server releases a connection that
  // sends none within its handshake deadline), and a path that does not work fails here.
  const absl::Status ping = c->Ping(std::max(deadline - absl::Now(), absl::Milliseconds(1)));
  if (!ping.ok()) {
    return absl::Status(ping.code(), absl::StrCat("connecting to kvserver at ", options.server,
                                                  ": first round trip: ", ping.message()));
  }
  return c;
}

Client::~Client() {
  stop_ = true;
  if (ticker_.joinable()) ticker_.join();
  if (engine_) engine_->Stop();
  rpc_.reset();   // fails calls still outstanding with CANCELLED
  conn_.reset();  // flushes writes still queued
}

WriteStats Client::write_stats() const { return write_count_->stats(); }

absl::Status Client::ConnectionError() const {
  return absl::UnavailableError(
      absl::StrCat("connection to kvserver at ", options_.server, " lost"));
}

template <typename T, typename Start>
T Client::Await(Start start) {
  Pending<T> s;
  start([&s](T r) {
    std::lock_guard<std::mutex> l(s.mu);
    s.result.emplace(std::move(r));
    s.done.store(true, std::memory_order_release);
  });
  Wait([&s] { return s.done.load(std::memory_order_acquire); });
  std::lock_guard<std::mutex> l(s.mu);  // the callback has left its critical section
  return std::move(*s.result);
}

void Client::Signal() {
  {
    std::lock_guard<std::mutex> l(progress_mu_);
    ++progress_epoch_;
  }
  progress_cv_.notify_all();
}

void Client::Wait(const std::function<bool()>& done) {
  while (!done()) {
    if (options_.caller_progress) {
      std::unique_lock<std::mutex> drive(drive_mu_, std::try_to_lock);
      if (drive.owns_lock()) {
        // Drive until this caller's own work is done; others' callbacks run here too.
        while (!done() && !stop_.load()) engine_->Drive(absl::Milliseconds(1));
        drive.unlock();
        Signal();  // another waiter may take over
        continue;
      }
    }
    std::unique_lock<std::mutex> l(progress_mu_);
    const uint64_t epoch = progress_epoch_;
    progress_cv_.wait_for(l, std::chrono::milliseconds(options_.caller_progress ? 1 : 100),
                          [&] { return progress_epoch_ != epoch || done(); });
  }
}

absl::Status Client::Call(proto::Method method, const google::protobuf::Message& req, Reply done) {
  // Every answer wakes the threads in Wait after its callback ran.
  absl::StatusOr<uint64_t> id = rpc_->Call(method, req.SerializeAsString(), options_.timeout,
                                           [this, done = std::move(done)](auto r) {
                                             done(std::move(r));
                                             Signal();
                                           });
  if (id.ok()) return absl::OkStatus();
  return conn_->failed() ? ConnectionError() : id.status();
}

void Client::WithGrant(uint32_t size, GrantUse use) {
  const int cls = proto::SlotClassOf(size);
  std::optional<proto::SlotGrant> ready;
  bool request = false;
  {
    MutexLock l(&mu_);
    Grants& g = *grants_[cls];
    if (!g.pool.empty()) {
      ready = g.pool.back();
      g.pool.pop_back();
    } else {
      g.waiters.push_back(std::move(use));
      request = !g.requesting;
      g.requesting = true;
    }
  }
  if (ready) {
    use(*ready);
  } else if (request) {
    RequestGrants(cls);
  }
}

void Client::RequestGrants(int cls) {
  proto::GrantRequest req;
  req.set_size(proto::SlotClassCapacity(cls));
  {
    MutexLock l(&mu_);
    req.set_count(std::clamp<uint32_t>(static_cast<uint32_t>(grants_[cls]->waiters.size()),
                                       kGrantBatch, proto::kMaxGrantsPerRequest));
  }
  auto on_reply = [this, cls](absl::StatusOr<std::string> bytes) {
    absl::StatusOr<proto::GrantResponse> r = Parse<proto::GrantResponse>(std::move(bytes));
    std::vector<std::pair<GrantUse, absl::StatusOr<proto::SlotGrant>>> run;
    bool again = false;
    {
      MutexLock l(&mu_);
      Grants& g = *grants_[cls];
      if (r.ok()) {
        for (const proto::SlotGrant& sg : r->grants()) g.pool.push_back(sg);
      }
      while (!g.waiters.empty() && (!r.ok() || !g.pool.empty())) {
        if (r.ok()) {
          run.emplace_back(std::move(g.waiters.front()), g.pool.back());
          g.pool.pop_back();
        } else {
          // A fresh Status per waiter: each then has one owner thread (see Parse).
          run.emplace_back(std::move(g.waiters.front()),
                           absl::Status(r.status().code(), r.status().message()));
        }
        g.waiters.pop_front();
      }
      again = !g.waiters.empty();
      g.requesting = again;
    }
    for (auto& [use, grant] : run) use(std::move(grant));
    if (again) RequestGrants(cls);
  };
  if (absl::Status st = Call(proto::GRANT, req, on_reply); !st.ok()) on_reply(st);
}

void Client::ReturnGrant(const proto::SlotGrant& g) {
  MutexLock l(&mu_);
  grants_[proto::SlotClassOf(g.capacity())]->pool.push_back(g);
}

void Client::WriteAndPut(const std::string& key, const std::string& value,
                         const proto::SlotGrant& g, PutDone done) {
  const uint32_t size = static_cast<uint32_t>(value.size());
  // The value write and the PUT go out together (one doorbell; one packet train on soft). The
  // batch ends before `done` runs on an error path: a callback may wait for this connection.
  std::optional<engine::Connection::Batch> batch;
  batch.emplace(conn_->BeginBatch());
  std::optional<engine::Path> posted;
  std::function<void()> release;  // frees the value buffer; empty for an empty value
  if (size > 0) {
    std::optional<uint32_t> taken;
    {
      MutexLock l(&mu_);
      if (!free_buffers_.empty()) {
        taken = free_buffers_.back();
        free_buffers_.pop_back();
      }
    }
    if (!taken) {
      batch.reset();
      ReturnGrant(g);
      return done(absl::ResourceExhaustedError("all value buffers in use; retry"));
    }
    const uint32_t buf = *taken;
    const size_t off = size_t{buf} * proto::kMaxValueBytes;
    std::memcpy(buffers_->data() + off, value.data(), size);
    // The buffer is free again once the write completed, or once the server answered the PUT
    // behind it (it handles a message only after the writes before it are placed, so the NIC
    // is done reading the buffer), whichever comes first: the write's own completion can trail
    // the answer, and waiting for it would run out of buffers under load.
    release = [this, buf, once = std::make_shared<std::atomic<bool>>(false)] {
      if (once->exchange(true)) return;
      MutexLock l(&mu_);
      free_buffers_.push_back(buf);
    };
    // Lazy: the PUT's answer confirms the write, so the NIC need not acknowledge each one.
    engine::WriteOptions lazy;
    lazy.lazy_completion = true;
    absl::Status st = conn_->Write(
        buffers_mr_->Sge(off, size), g.addr(), g.rkey(),
        [release](const engine::WriteResult&) { release(); }, &posted, lazy);
    if (!st.ok()) {
      batch.reset();
      release();
      return done(conn_->failed() ? ConnectionError() : st);
    }
  }
  proto::PutRequest req;
  req.set_key(key);
  req.set_grant_id(g.grant_id());
  req.set_value_size(size);
  req.set_value_path(!posted                            ? proto::PATH_UNKNOWN
                     : *posted == engine::Path::kUnload ? proto::UNLOAD
                                                        : proto::OFFLOAD);
  absl::Status st = Call(proto::PUT, req, [done, release](absl::StatusOr<std::string> bytes) {
    // An answer from the server (not a local timeout or cancellation) means it saw the PUT.
    const absl::StatusCode code = bytes.status().code();
    if (release && code != absl::StatusCode::kDeadlineExceeded &&
        code != absl::StatusCode::kCancelled) {
      release();
    }
    absl::StatusOr<proto::PutResponse> r = Parse<proto::PutResponse>(std::move(bytes));
    if (!r.ok()) return done(std::move(r).status());
    done(r->version());
  });
  batch.reset();
  if (!st.ok()) {
    ReturnGrant(g);  // never named by a PUT: still unused
    done(st);
  }
}

void Client::PutAsync(absl::string_view key, absl::string_view value, PutDone done) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return done(st);
  if (absl::Status st = proto::CheckValueSize(value.size()); !st.ok()) return done(st);
  if (conn_->failed()) return done(ConnectionError());
  WithGrant(static_cast<uint32_t>(value.size()),
            [this, k = std::string(key), v = std::string(value),
             done](absl::StatusOr<proto::SlotGrant> g) {
              if (!g.ok()) return done(std::move(g).status());
              WriteAndPut(k, v, *g, done);
            });
}

void Client::GetAsync(absl::string_view key,
                      std::function<void(absl::StatusOr<std::string>)> done) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return done(st);
  proto::GetRequest req;
  req.set_key(std::string(key));
  absl::Status st = Call(proto::GET, req, [done](absl::StatusOr<std::string> bytes) {
    absl::StatusOr<proto::GetResponse> r = Parse<proto::GetResponse>(std::move(bytes));
    if (!r.ok()) return done(std::move(r).status());
    done(std::move(*r->mutable_value()));
  });
  if (!st.ok()) done(st);
}

void Client::DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return done(st);
  proto::DeleteRequest req;
  req.set_key(std::string(key));
  absl::Status st = Call(proto::DELETE, req, [done](absl::StatusOr<std::string> bytes) {
    done(Parse<proto::DeleteResponse>(std::move(bytes)).status());
  });
  if (!st.ok()) done(st);
}

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  return WithRetries<absl::Status>(options_.max_retries, /*idempotent=*/true, [&] {
    return Await<absl::StatusOr<uint64_t>>([&](PutDone d) { PutAsync(key, value, d); }).status();
  });
}

absl::StatusOr<std::string> Client::Get(absl::string_view key) {
  return WithRetries<absl::StatusOr<std::string>>(options_.max_retries, true, [&] {
    return Await<absl::StatusOr<std::string>>(
        [&](std::function<void(absl::StatusOr<std::string>)> d) { GetAsync(key, d); });
  });
}

absl::Status Client::Delete(absl::string_view key) {
  // Not retried on a timeout: the first attempt may have applied, and a retry would then
  // report NOT_FOUND for a delete that succeeded.
  return WithRetries<absl::Status>(options_.max_retries, false, [&] {
    return Await<absl::Status>([&](std::function<void(absl::Status)> d) { DeleteAsync(key, d); });
  });
}

absl::StatusOr<ScanPage> Client::Scan(absl::string_view start, absl::string_view end,
                                      uint32_t limit) {
  proto::ScanRequest req;
  req.set_start_key(std::string(start));
  req.set_end_key(std::string(end));
  req.set_limit(limit);
  return WithRetries<absl::StatusOr<ScanPage>>(options_.max_retries, true, [&] {
    auto bytes = Await<absl::StatusOr<std::string>>([&](Reply d) {
      if (absl::Status st = Call(proto::SCAN, req, d); !st.ok()) d(st);
    });
    absl::StatusOr<proto::ScanResponse> r = Parse<proto::ScanResponse>(std::move(bytes));
    if (!r.ok()) return absl::StatusOr<ScanPage>(std::move(r).status());
    if (r->keys_size() != r->values_size()) {
      return absl::StatusOr<ScanPage>(absl::InternalError("scan response: keys and values differ"));
    }
    ScanPage page;
    for (int i = 0; i < r->keys_size(); ++i) {
      page.items.emplace_back(std::move(*r->mutable_keys(i)), std::move(*r->mutable_values(i)));
    }
    page.more = r->more();
    return absl::StatusOr<ScanPage>(std::move(page));
  });
}

absl::Status Client::Ping(absl::Duration timeout) {
  proto::PingRequest req;
  return Await<absl::StatusOr<std::string>>([&](Reply d) {
           absl::StatusOr<uint64_t> id = rpc_->Call(proto::PING, req.SerializeAsString(), timeout,
                                                    [this, d](absl::StatusOr<std::string> r) {
                                                      d(std::move(r));
                                                      Signal();
                                                    });
           if (!id.ok()) d(conn_->failed() ? ConnectionError() : id.status());
         })
      .status();
}

absl::StatusOr<proto::StatsResponse> Client::Stats() {
  proto::StatsRequest req;
  return WithRetries<absl::StatusOr<proto::StatsResponse>>(options_.max_retries, true, [&] {
    return Parse<proto::StatsResponse>(Await<absl::StatusOr<std::string>>([&](Reply d) {
      if (absl::Status st = Call(proto::STATS, req, d); !st.ok()) d(st);
    }));
  });
}

}  // namespace unloadkv
