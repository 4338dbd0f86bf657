#include "client/cluster_router.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/not_sent.h"
#include "transport/cluster/etcd_cluster_map.h"

namespace unloadkv {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(20);
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(500);

absl::Duration Backoff(int attempts) {
  absl::Duration d = kFirstBackoff;
  for (int i = 1; i < attempts && d < kMaxBackoff; ++i) d *= 2;
  return std::min(d, kMaxBackoff);
}

// A refusal no retry can change: the node does not accept this client's credentials.
bool Refused(absl::StatusCode c) {
  return c == absl::StatusCode::kUnauthenticated || c == absl::StatusCode::kPermissionDenied;
}

bool Lost(absl::StatusCode c) {
  return c == absl::StatusCode::kUnavailable || c == absl::StatusCode::kDeadlineExceeded ||
         c == absl::StatusCode::kCancelled;
}

}  // namespace

struct ClusterRouter::Op {
  std::string key;
  bool write = false;
  absl::Time deadline;
  int attempts = 0;
  // Issues the operation on the shard primary's connection; its completion calls Judge.
  std::function<void(NodeClient&, uint32_t shard, std::shared_ptr<Op> self)> issue;
  // Completes the operation with an error.
  std::function<void(absl::Status)> fail;
  // Judges a completion: true when the router took over (retry scheduled, or failed with a
  // rewritten status); false when the caller completes with its own result.
  ClusterRouter* router = nullptr;
  bool Judge(const std::shared_ptr<Op>& self, const absl::Status& st) {
    if (st.ok()) return false;
    // A write whose PUT never left the client changed nothing: it goes again, as a read does.
    if (st.code() == absl::StatusCode::kAborted ||
        (Lost(st.code()) && (!write || client_internal::WasNotSent(st)))) {
      router->Retry(self, absl::Status(st.code(), st.message()));
      return true;
    }
    if (write && Lost(st.code())) {
      // The primary may be gone or cut off: route the next operations by a fresh map.
      router->stale_.store(true);
      fail(absl::UnknownError(absl::StrCat("outcome unknown: ", st.message())));
      return true;
    }
    return false;
  }
};

absl::StatusOr<std::unique_ptr<ClusterRouter>> ClusterRouter::Connect(const ClientOptions& options,
                                                                      const ClientHooks& hooks) {
  if (hooks.embedding != nullptr && !hooks.embedding->spawn) {
    return absl::InvalidArgumentError("an embedded cluster client needs ClientEmbedding::spawn");
  }
  std::unique_ptr<ClusterRouter> r(new ClusterRouter());
  r->options_ = options;
  r->node_hooks_ = hooks;
  r->node_hooks_.cluster_map = nullptr;
  r->embedding_ = hooks.embedding;
  r->clock_ = hooks.embedding != nullptr ? hooks.embedding->clock : RealClock::Get();
  r->options_.caller_progress = false;  // engine threads drive every node's connection
  r->options_.etcd.clear();
  if (hooks.cluster_map != nullptr) {
    r->map_ = hooks.cluster_map;
  } else {
    cluster::EtcdSecurity security;
    security.ca_file = options.etcd_ca;
    security.cert_file = options.etcd_cert;
    security.key_file = options.etcd_key;
    security.user = options.etcd_user;
    security.password_file = options.etcd_password_file;
    auto etcd = cluster::EtcdClusterMap::Open(options.etcd, options.cluster, security);
    if (!etcd.ok()) return etcd.status();
    r->owned_map_ = std::move(*etcd);
    r->map_ = r->owned_map_.get();
  }
  if (absl::Status st = r->Refresh(); !st.ok()) return st;
  ClusterRouter* self = r.get();
  auto watch = r->map_->Watch([self](int64_t) { self->stale_.store(true); });
  if (!watch.ok()) return watch.status();
  r->watch_ = std::move(*watch);
  if (r->embedding_ != nullptr) {
    r->embedding_->spawn([self] { self->Background(); });
  } else {
    r->thread_ = std::thread([self] { self->Background(); });
  }
  return r;
}

ClusterRouter::~ClusterRouter() {
  watch_.reset();
  {
    std::lock_guard<std::mutex> l(tasks_mu_);
    stop_ = true;
  }
  tasks_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (embedding_ != nullptr) {
    Block([this] {
      std::lock_guard<std::mutex> l(tasks_mu_);
      return background_done_;
    });
  }
  // Operations still waiting for a retry fail now.
  for (auto& t : tasks_) t(true);
  std::lock_guard<std::mutex> l(mu_);
  conns_.clear();
}

absl::Status ClusterRouter::Refresh() {
  absl::StatusOr<cluster::ClusterView> view = map_->Read();
  if (!view.ok()) return view.status();
  std::vector<std::shared_ptr<NodeClient>> closing;
  {
    std::lock_guard<std::mutex> l(mu_);
    view_ = *std::move(view);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (!view_.IsLive(it->first) || !it->second->connected()) {
        WriteStats w = it->second->write_stats();
        retired_.offload += w.offload;
        retired_.unload += w.unload;
        retired_.errors += w.errors;
        closing.push_back(std::move(it->second));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return absl::OkStatus();  // `closing` closes outside the lock
}

std::shared_ptr<NodeClient> ClusterRouter::OpenConnectionFor(absl::string_view key,
                                                             uint32_t* shard) {
  std::lock_guard<std::mutex> l(mu_);
  const cluster::ShardInfo* s = view_.ShardFor(key);
  if (s == nullptr || s->primary.empty()) return nullptr;
  auto it = conns_.find(s->primary);
  if (it == conns_.end() || !it->second->connected()) return nullptr;
  *shard = s->id;
  return it->second;
}

std::shared_ptr<NodeClient> ClusterRouter::ConnectionFor(absl::string_view key, uint32_t* shard,
                                                         absl::Status* why) {
  if (stale_.exchange(false)) {
    // Without the map service the client routes by the map it has (etcd may be down while
    // every node serves on).
    if (absl::Status st = Refresh(); !st.ok()) stale_.store(true);
  }
  if (auto c = OpenConnectionFor(key, shard)) return c;
  std::string node, address;
  {
    std::lock_guard<std::mutex> l(mu_);
    const cluster::ShardInfo* s = view_.ShardFor(key);
    if (s == nullptr || s->primary.empty() || !view_.IsLive(s->primary)) {
      *why = absl::UnavailableError(
          absl::StrCat("shard ", s == nullptr ? 0 : s->id, " has no live primary (state ",
                       s == nullptr ? "?" : cluster::ShardStateName(view_.StateOf(*s)), ")"));
      stale_.store(true);
      return nullptr;
    }
    *shard = s->id;
    node = s->primary;
    address = view_.nodes.at(node).rpc_address;
  }
  ClientOptions o = options_;
  o.server = address;
  absl::StatusOr<std::unique_ptr<NodeClient>> impl = NodeClient::Connect(o, node_hooks_);
  if (!impl.ok()) {
    *why = absl::Status(
        Refused(impl.status().code()) ? impl.status().code() : absl::StatusCode::kUnavailable,
        absl::StrCat("primary ", node, " at ", address, ": ", impl.status().message()));
    stale_.store(true);
    return nullptr;
  }
  std::shared_ptr<NodeClient> conn = *std::move(impl);
  std::lock_guard<std::mutex> l(mu_);
  conns_[node] = conn;
  return conn;
}

void ClusterRouter::Post(std::function<void(bool)> task) {
  {
    std::lock_guard<std::mutex> l(tasks_mu_);
    if (!stop_) {
      tasks_.push_back(std::move(task));
      tasks_cv_.notify_all();
      return;
    }
  }
  task(true);  // closing: fail on the caller's thread
}

std::function<void(bool)> ClusterRouter::NextTask() {
  auto ready = [this] { return stop_ || !tasks_.empty(); };  // under tasks_mu_
  if (embedding_ != nullptr) {
    // The world runs until there is work (the wait below then returns at once: only this
    // loop takes tasks, and stop_ is never reset).
    Block([&] {
      std::lock_guard<std::mutex> l(tasks_mu_);
      return ready();
    });
  }
  std::unique_lock<std::mutex> l(tasks_mu_);
  tasks_cv_.wait(l, ready);
  if (stop_) {
    background_done_ = true;
    return nullptr;
  }
  std::function<void(bool)> task = std::move(tasks_.front());
  tasks_.pop_front();
  return task;
}

void ClusterRouter::Background() {
  while (std::function<void(bool)> task = NextTask()) task(false);
}

void ClusterRouter::Finished() {
  in_flight_.fetch_sub(1);
  {
    std::lock_guard<std::mutex> l(done_mu_);
    ++completions_;
  }
  done_cv_.notify_all();
}

void ClusterRouter::Start(std::shared_ptr<Op> op) {
  in_flight_.fetch_add(1);
  op->router = this;
  op->deadline = clock_->Now() + options_.failover_timeout;
  Attempt(std::move(op), /*may_block=*/false);
}

void ClusterRouter::Attempt(std::shared_ptr<Op> op, bool may_block) {
  uint32_t shard = 0;
  std::shared_ptr<NodeClient> conn;
  absl::Status why = absl::UnavailableError("no connection");
  if (may_block) {
    conn = ConnectionFor(op->key, &shard, &why);
  } else {
    // A changed map (the watch fired) or a missing connection: reading the map and connecting
    // block, so the router's thread does it.
    if (!stale_.load()) conn = OpenConnectionFor(op->key, &shard);
    if (conn == nullptr) {
      Post([this, op](bool closing) {
        if (closing) return op->fail(absl::CancelledError("client closing"));
        Attempt(op, true);
      });
      return;
    }
  }
  if (conn == nullptr) return Retry(op, why);
  op->issue(*conn, shard, op);
}

void ClusterRouter::Retry(std::shared_ptr<Op> op, absl::Status why) {
  if (Refused(why.code())) return op->fail(why);  // waiting would not change the answer
  ++op->attempts;
  stale_.store(true);
  if (clock_->Now() + Backoff(op->attempts) > op->deadline) {
    return op->fail(absl::UnavailableError(
        absl::StrCat("no primary answered within ", absl::FormatDuration(options_.failover_timeout),
                     " (", op->attempts, " attempts); last: ", why.message())));
  }
  const absl::Time due = clock_->Now() + Backoff(op->attempts);
  Post([this, op, due](bool closing) {
    if (closing) return op->fail(absl::CancelledError("client closing"));
    // Waiting here holds up the router's queue only by the backoff (at most 500 ms).
    SleepUntil(due);
    Attempt(op, true);
  });
}

void ClusterRouter::StoreAsync(absl::string_view key, absl::string_view value,
                               std::function<void(absl::StatusOr<uint64_t>)> done, bool merge) {
  auto op = std::make_shared<Op>();
  op->key = std::string(key);
  op->write = true;
  auto finish = [this, done](absl::StatusOr<uint64_t> r) {
    done(std::move(r));
    Finished();
  };
  op->fail = [finish](absl::Status st) { finish(std::move(st)); };
  op->issue = [finish, merge, value = std::string(value)](NodeClient& c, uint32_t shard,
                                                          std::shared_ptr<Op> self) {
    c.StoreAsync(
        self->key, value,
        [finish, self](absl::StatusOr<uint64_t> r) {
          if (!self->Judge(self, r.status())) finish(std::move(r));
        },
        shard, merge);
  };
  Start(std::move(op));
}

void ClusterRouter::GetAsync(absl::string_view key,
                             std::function<void(absl::StatusOr<std::string>)> done) {
  auto op = std::make_shared<Op>();
  op->key = std::string(key);
  auto finish = [this, done](absl::StatusOr<std::string> r) {
    done(std::move(r));
    Finished();
  };
  op->fail = [finish](absl::Status st) { finish(std::move(st)); };
  op->issue = [finish](NodeClient& c, uint32_t, std::shared_ptr<Op> self) {
    c.GetAsync(self->key, [finish, self](absl::StatusOr<std::string> r) {
      if (!self->Judge(self, r.status())) finish(std::move(r));
    });
  };
  Start(std::move(op));
}

void ClusterRouter::DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) {
  auto op = std::make_shared<Op>();
  op->key = std::string(key);
  op->write = true;
  auto finish = [this, done](absl::Status st) {
    done(std::move(st));
    Finished();
  };
  op->fail = finish;
  op->issue = [finish](NodeClient& c, uint32_t, std::shared_ptr<Op> self) {
    c.DeleteAsync(self->key, [finish, self](absl::Status st) {
      if (!self->Judge(self, st)) finish(std::move(st));
    });
  };
  Start(std::move(op));
}

template <typename T, typename StartFn>
T ClusterRouter::Await(StartFn start) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<T> result;
  };
  auto s = std::make_shared<State>();
  start([s](T r) {
    std::lock_guard<std::mutex> l(s->mu);
    s->result.emplace(std::move(r));
    s->cv.notify_all();
  });
  if (embedding_ != nullptr) {
    Block([&] {
      std::lock_guard<std::mutex> l(s->mu);
      return s->result.has_value();
    });
  }
  std::unique_lock<std::mutex> l(s->mu);
  s->cv.wait(l, [&] { return s->result.has_value(); });
  return std::move(*s->result);
}

void ClusterRouter::Block(const std::function<bool()>& done) { embedding_->wait(done); }

void ClusterRouter::SleepUntil(absl::Time due) {
  if (embedding_ != nullptr) return Block([this, due] { return clock_->Now() >= due; });
  absl::SleepFor(due - clock_->Now());
}

absl::Status ClusterRouter::Store(absl::string_view key, absl::string_view value, bool merge) {
  return Await<absl::StatusOr<uint64_t>>([&](auto d) { StoreAsync(key, value, d, merge); })
      .status();
}

absl::StatusOr<std::string> ClusterRouter::Get(absl::string_view key) {
  return Await<absl::StatusOr<std::string>>([&](auto d) { GetAsync(key, d); });
}

absl::Status ClusterRouter::Delete(absl::string_view key) {
  return Await<absl::Status>([&](auto d) { DeleteAsync(key, d); });
}

absl::StatusOr<ScanPage> ClusterRouter::Scan(absl::string_view start, absl::string_view end,
                                             uint32_t limit) {
  ScanPage page;
  std::string cur(start);
  const absl::Time deadline = clock_->Now() + options_.failover_timeout;
  int attempts = 0;
  while (true) {
    uint32_t shard = 0;
    absl::Status why;
    std::shared_ptr<NodeClient> conn = ConnectionFor(cur, &shard, &why);
    std::string shard_end;
    {
      std::lock_guard<std::mutex> l(mu_);
      const cluster::ShardInfo* s = view_.ShardFor(cur);
      shard_end = s == nullptr ? "" : s->end;
    }
    // This shard's part of [cur, end).
    const bool last_shard = shard_end.empty() || (!end.empty() && end <= shard_end);
    const std::string sub_end = last_shard ? std::string(end) : shard_end;
    absl::StatusOr<ScanPage> part =
        conn == nullptr
            ? absl::StatusOr<ScanPage>(why)
            : conn->Scan(cur, sub_end, limit - static_cast<uint32_t>(page.items.size()));
    if (!part.ok()) {
      const absl::StatusCode c = part.status().code();
      if ((c == absl::StatusCode::kAborted || Lost(c)) &&
          clock_->Now() + Backoff(attempts + 1) < deadline) {
        stale_.store(true);
        SleepUntil(clock_->Now() + Backoff(++attempts));
        continue;
      }
      return part.status();
    }
    for (auto& item : part->items) page.items.push_back(std::move(item));
    if (part->more || last_shard) {
      page.more = part->more;
      return page;
    }
    if (page.items.size() >= limit) {
      page.more = true;
      return page;
    }
    cur = shard_end;
  }
}

absl::StatusOr<ServerStats> ClusterRouter::Stats() {
  std::vector<std::pair<std::string, std::string>> nodes;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [name, n] : view_.nodes) nodes.emplace_back(name, n.rpc_address);
  }
  ServerStats sum;
  for (const auto& [name, address] : nodes) {
    ClientOptions o = options_;
    o.server = address;
    absl::StatusOr<std::unique_ptr<NodeClient>> c = NodeClient::Connect(o, node_hooks_);
    if (!c.ok()) return c.status();
    absl::StatusOr<ServerStats> s = (*c)->Stats();
    if (!s.ok()) return s.status();
    sum.keys += s->keys;
    sum.arena_bytes += s->arena_bytes;
    sum.arena_used_bytes += s->arena_used_bytes;
    sum.connections += s->connections;
    sum.offload_writes += s->offload_writes;
    sum.unload_writes += s->unload_writes;
    sum.transport = s->transport;
    sum.staging_memory = s->staging_memory;
    sum.fsync = s->fsync;
    sum.log_records += s->log_records;
    sum.log_syncs += s->log_syncs;
    if (!s->log_failure.empty()) sum.log_failure = name + ": " + s->log_failure;
  }
  return sum;
}

void ClusterRouter::Wait(const std::function<bool()>& done) {
  if (embedding_ != nullptr) return embedding_->wait(done);
  std::unique_lock<std::mutex> l(done_mu_);
  while (true) {
    l.unlock();
    if (done()) return;
    l.lock();
    const uint64_t seen = completions_;
    done_cv_.wait_for(l, std::chrono::milliseconds(10), [&] { return completions_ != seen; });
  }
}

bool ClusterRouter::connected() const {
  // A lost node is replaced through the map: the client as a whole stays usable.
  return true;
}

WriteStats ClusterRouter::write_stats() const {
  std::lock_guard<std::mutex> l(mu_);
  WriteStats w = retired_;
  for (const auto& [node, c] : conns_) {
    WriteStats s = c->write_stats();
    w.offload += s.offload;
    w.unload += s.unload;
    w.errors += s.errors;
  }
  return w;
}

const std::string& ClusterRouter::staging_memory() const {
  static const std::string kNone = "(no connection yet)";
  std::lock_guard<std::mutex> l(mu_);
  return conns_.empty() ? kNone : conns_.begin()->second->staging_memory();
}

}  // namespace unloadkv
