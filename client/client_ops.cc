// NodeClient: the operations. A PUT takes a grant (GrantPool, asking the server for more
// when the class's pool is empty), writes the value from a registered buffer (ValueBuffers)
// into the granted slot through the engine, and sends the PUT behind it on the connection.
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/not_sent.h"
#include "proto/limits.h"
#include "transport/base/object_pool.h"

namespace unloadkv {

client_internal::GrantPool& NodeClient::GrantsOf(uint32_t shard) {
  MutexLock l(&grants_mu_);
  std::unique_ptr<client_internal::GrantPool>& pool = grants_[shard];
  if (pool == nullptr) pool = std::make_unique<client_internal::GrantPool>();
  return *pool;  // pools are never removed: the reference stays valid
}

void NodeClient::WithGrant(uint32_t shard, uint32_t size, client_internal::GrantPool::Use use) {
  const int cls = proto::SlotClassOf(size);
  bool request = false;
  std::optional<proto::SlotGrant> ready = GrantsOf(shard).TakeOrWait(cls, std::move(use), &request);
  if (ready) {
    use(*ready);
  } else if (request) {
    RequestGrants(shard, cls);
  }
}

void NodeClient::RequestGrants(uint32_t shard, int cls) {
  client_internal::GrantPool& pool = GrantsOf(shard);
  proto::GrantRequest req;
  req.set_size(proto::SlotClassCapacity(cls));
  req.set_count(pool.RequestSize(cls));
  req.set_shard(shard);
  auto on_reply = [this, &pool, shard, cls](absl::StatusOr<std::string> bytes) {
    client_internal::GrantPool::Answered a =
        pool.OnAnswer(cls, client_internal::Parse<proto::GrantResponse>(std::move(bytes)));
    for (auto& [use, grant] : a.run) use(std::move(grant));
    if (a.again) RequestGrants(shard, cls);
  };
  if (absl::Status st = Call(proto::GRANT, req, on_reply); !st.ok()) on_reply(st);
}

NodeClient::PutState* NodeClient::TakePutState(PutDone done, int refs) {
  std::unique_ptr<PutState> ps;
  {
    MutexLock l(&put_states_mu_);
    if (!put_states_.empty()) {
      ps = std::move(put_states_.back());
      put_states_.pop_back();
    }
  }
  if (ps == nullptr) ps = std::make_unique<PutState>();
  ps->done = std::move(done);
  ps->buffer.reset();
  ps->released.store(false, std::memory_order_relaxed);
  ps->refs.store(refs, std::memory_order_relaxed);
  return ps.release();
}

void NodeClient::UnrefPutState(PutState* ps) {
  if (ps->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::unique_ptr<PutState> owned(ps);
  owned->done = nullptr;
  MutexLock l(&put_states_mu_);
  put_states_.push_back(std::move(owned));
}

void NodeClient::ReleaseValue(PutState* ps) {
  if (ps->buffer && !ps->released.exchange(true, std::memory_order_acq_rel)) {
    buffers_->Release(*ps->buffer);
  }
}

void NodeClient::WriteAndPut(uint32_t shard, absl::string_view key, absl::string_view value,
                             const proto::SlotGrant& g, bool merge, PutDone done) {
  const uint32_t size = static_cast<uint32_t>(value.size());
  // The value write and the PUT go out together (one doorbell; one packet train on soft). The
  // batch ends before `done` runs on an error path: a callback may wait for this connection.
  std::optional<engine::Connection::Batch> batch;
  batch.emplace(conn_->BeginBatch());
  std::optional<engine::Path> posted;
  // References: the PUT's answer, and the value write's completion (none for an empty value).
  PutState* ps = TakePutState(std::move(done), size > 0 ? 2 : 1);
  // Fails the PUT before it was sent: the state goes with the callbacks that will not run.
  auto not_sent = [&](absl::Status st, int refs) {
    batch.reset();
    PutDone d = std::move(ps->done);
    for (int i = 0; i < refs; ++i) UnrefPutState(ps);
    d(std::move(st));
  };
  if (size > 0) {
    const std::optional<uint32_t> taken = buffers_->Take();
    if (!taken) {
      GrantsOf(shard).Return(g);
      return not_sent(absl::ResourceExhaustedError("all value buffers in use; retry"), 2);
    }
    ps->buffer = *taken;
    std::memcpy(buffers_->data(*taken), value.data(), size);
    // The buffer is free again once the write completed, or once the server answered the PUT
    // behind it (it handles a message only after the writes before it are placed, so the NIC
    // is done reading the buffer), whichever comes first: the write's own completion can trail
    // the answer, and waiting for it would run out of buffers under load.
    // Lazy: the PUT's answer confirms the write, so the NIC need not acknowledge each one.
    engine::WriteOptions lazy;
    lazy.lazy_completion = true;
    absl::Status st = conn_->Write(
        buffers_->Sge(*taken, size), g.addr(), g.rkey(),
        [this, ps](const engine::WriteResult&) {
          ReleaseValue(ps);
          UnrefPutState(ps);
        },
        &posted, lazy);
    if (!st.ok()) {
      ReleaseValue(ps);
      return not_sent(client_internal::NotSent(conn_->failed() ? ConnectionError() : st), 2);
    }
  }
  thread_local proto::PutRequest req;  // serialized by Call before it returns: reused
  req.set_key(key.data(), key.size());
  req.set_grant_id(g.grant_id());
  req.set_shard(shard);
  req.set_value_size(size);
  req.set_merge_fields(merge);
  req.set_value_path(!posted                            ? proto::PATH_UNKNOWN
                     : *posted == engine::Path::kUnload ? proto::UNLOAD
                                                        : proto::OFFLOAD);
  // The PUT ends the grant's window itself where the server made it one (SlotGrant.window):
  // the server's NIC invalidates it as the PUT arrives, after the value write before it.
  engine::SendOptions send;
  if (g.window()) send.invalidate_rkey = g.rkey();
  if (absl::Status st = CallPut(req, ps, send); !st.ok()) {
    GrantsOf(shard).Return(g);  // never named by a PUT: still unused
    // The write (if any) was posted: its completion still holds its reference.
    not_sent(client_internal::NotSent(st), 1);
    return;
  }
  batch.reset();
}

absl::Status NodeClient::CallPut(const proto::PutRequest& req, PutState* ps,
                                 const engine::SendOptions& send) {
  return Call(
      proto::PUT, req,
      [this, ps](absl::StatusOr<std::string> bytes) {
        // An answer from the server (not a local timeout or cancellation) means it saw the PUT.
        const absl::StatusCode code = bytes.status().code();
        if (code != absl::StatusCode::kDeadlineExceeded && code != absl::StatusCode::kCancelled) {
          ReleaseValue(ps);
        }
        absl::StatusOr<proto::PutResponse> r =
            client_internal::Parse<proto::PutResponse>(std::move(bytes));
        PutDone d = std::move(ps->done);
        UnrefPutState(ps);
        if (!r.ok()) return d(std::move(r).status());
        d(r->version());
      },
      send);
}

void NodeClient::PutInline(uint32_t shard, absl::string_view key, absl::string_view value,
                           bool merge, PutDone done) {
  thread_local proto::PutRequest req;  // serialized by Call before it returns: reused
  req.set_key(key.data(), key.size());
  req.set_shard(shard);
  req.set_value_size(static_cast<uint32_t>(value.size()));
  req.set_merge_fields(merge);
  req.set_value_path(proto::INLINE);
  req.set_value(value.data(), value.size());
  PutState* ps = TakePutState(std::move(done), 1);  // the answer's reference; no buffer
  if (absl::Status st = CallPut(req, ps, engine::SendOptions()); !st.ok()) {
    PutDone d = std::move(ps->done);
    UnrefPutState(ps);
    d(client_internal::NotSent(conn_->failed() ? ConnectionError() : st));
  }
}

void NodeClient::SendWaitingInline() {
  while (waiting_count_.load(std::memory_order_acquire) > 0 && !stop_.load()) {
    if (sending_waiting_.exchange(true, std::memory_order_acquire)) return;  // another sends
    for (;;) {
      WaitingInline w;
      {
        MutexLock l(&waiting_mu_);
        if (waiting_inline_.empty() || stop_.load() ||
            rpc_->in_flight() >= options_.max_in_flight) {
          break;
        }
        w = std::move(waiting_inline_.front());
        waiting_inline_.pop_front();
      }
      PutInline(w.shard, w.key, w.value, w.merge, std::move(w.done));
      // Counted until sent: a PUT issued meanwhile sees one waiting and queues behind it
      // rather than overtake it.
      waiting_count_.fetch_sub(1, std::memory_order_release);
    }
    sending_waiting_.store(false, std::memory_order_release);
    // An answer that came while this thread held the flag found it taken and returned: look
    // again, or its room would go unused.
    if (rpc_->in_flight() >= options_.max_in_flight) return;
  }
}

void NodeClient::StoreAsync(absl::string_view key, absl::string_view value, PutDone done,
                            uint32_t shard, bool merge) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return done(st);
  if (absl::Status st = proto::CheckValueSize(value.size()); !st.ok()) return done(st);
  if (conn_->failed()) return done(client_internal::NotSent(ConnectionError()));
  if (value.size() <= inline_put_bytes_) {  // InlineBytesOn
    if (waiting_count_.load(std::memory_order_acquire) == 0 &&
        rpc_->in_flight() < options_.max_in_flight) {
      return PutInline(shard, key, value, merge, std::move(done));
    }
    // No room for another call: it waits (as a granted PUT waits for its grant) rather than
    // fail with RESOURCE_EXHAUSTED, so a batch of more inline PutAsync than max_in_flight
    // completes.
    {
      MutexLock l(&waiting_mu_);
      waiting_inline_.push_back(
          WaitingInline{shard, std::string(key), std::string(value), merge, std::move(done)});
      waiting_count_.fetch_add(1, std::memory_order_release);
    }
    return SendWaitingInline();  // room may have come meanwhile: no answer would send it then
  }
  // A pooled grant (the usual case): the value goes now, with no copy of the key and value
  // and no closure to hold them until a grant arrives.
  if (std::optional<proto::SlotGrant> g =
          GrantsOf(shard).TryTake(proto::SlotClassOf(static_cast<uint32_t>(value.size())))) {
    return WriteAndPut(shard, key, value, *g, merge, std::move(done));
  }
  WithGrant(shard, static_cast<uint32_t>(value.size()),
            [this, shard, merge, k = std::string(key), v = std::string(value),
             done](absl::StatusOr<proto::SlotGrant> g) {
              // No PUT was sent: the write changed nothing.
              if (!g.ok()) return done(client_internal::NotSent(std::move(g).status()));
              WriteAndPut(shard, k, v, *g, merge, done);
            });
}

void NodeClient::GetAsync(absl::string_view key,
                          std::function<void(absl::StatusOr<std::string>)> done) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return done(st);
  // This thread's request: Call serializes it before it returns (no allocation once warm).
  thread_local proto::GetRequest req;
  req.set_key(key.data(), key.size());
  // The answer's callback points to pooled state: a capture of `done` would allocate.
  GetDone* state = ObjectPool<GetDone>::Take();
  *state = std::move(done);
  absl::Status st = Call(proto::GET, req, [state](absl::StatusOr<std::string> bytes) {
    GetDone d = std::move(*state);
    ObjectPool<GetDone>::Give(state);
    if (!bytes.ok()) return d(std::move(bytes).status());
    // Parsed into this thread's response; its value is moved out to the caller.
    thread_local proto::GetResponse r;
    if (!r.ParseFromString(*bytes)) return d(absl::InternalError("server response does not parse"));
    d(std::move(*r.mutable_value()));
  });
  if (!st.ok()) {
    GetDone d = std::move(*state);
    ObjectPool<GetDone>::Give(state);
    d(st);
  }
}

void NodeClient::DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) {
  if (absl::Status st = proto::CheckKey(key); !st.ok()) return done(st);
  proto::DeleteRequest req;
  req.set_key(std::string(key));
  absl::Status st = Call(proto::DELETE, req, [done](absl::StatusOr<std::string> bytes) {
    done(client_internal::Parse<proto::DeleteResponse>(std::move(bytes)).status());
  });
  if (!st.ok()) done(st);
}

absl::Status NodeClient::Store(absl::string_view key, absl::string_view value, bool merge) {
  // A merge is idempotent too: applying the same field values again leaves the same record.
  return client_internal::WithRetries<absl::Status>(options_.max_retries, /*idempotent=*/true, [&] {
    return Await<absl::StatusOr<uint64_t>>(
               [&](PutDone d) { StoreAsync(key, value, d, /*shard=*/0, merge); })
        .status();
  });
}

absl::StatusOr<std::string> NodeClient::Get(absl::string_view key) {
  return client_internal::WithRetries<absl::StatusOr<std::string>>(options_.max_retries, true, [&] {
    return Await<absl::StatusOr<std::string>>(
        [&](std::function<void(absl::StatusOr<std::string>)> d) { GetAsync(key, d); });
  });
}

absl::Status NodeClient::Delete(absl::string_view key) {
  // Not retried on a timeout: the first attempt may have applied, and a retry would then
  // report NOT_FOUND for a delete that succeeded.
  return client_internal::WithRetries<absl::Status>(options_.max_retries, false, [&] {
    return Await<absl::Status>([&](std::function<void(absl::Status)> d) { DeleteAsync(key, d); });
  });
}

absl::StatusOr<ScanPage> NodeClient::Scan(absl::string_view start, absl::string_view end,
                                          uint32_t limit) {
  proto::ScanRequest req;
  req.set_start_key(std::string(start));
  req.set_end_key(std::string(end));
  req.set_limit(limit);
  return client_internal::WithRetries<absl::StatusOr<ScanPage>>(options_.max_retries, true, [&] {
    auto bytes = Await<absl::StatusOr<std::string>>([&](Reply d) {
      if (absl::Status st = Call(proto::SCAN, req, d); !st.ok()) d(st);
    });
    absl::StatusOr<proto::ScanResponse> r =
        client_internal::Parse<proto::ScanResponse>(std::move(bytes));
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

absl::StatusOr<ServerStats> NodeClient::Stats() {
  proto::StatsRequest req;
  absl::StatusOr<proto::StatsResponse> r =
      client_internal::WithRetries<absl::StatusOr<proto::StatsResponse>>(
          options_.max_retries, true, [&] {
            return client_internal::Parse<proto::StatsResponse>(
                Await<absl::StatusOr<std::string>>([&](Reply d) {
                  if (absl::Status st = Call(proto::STATS, req, d); !st.ok()) d(st);
                }));
          });
  if (!r.ok()) return r.status();
  ServerStats s;
  s.keys = r->keys();
  s.arena_bytes = r->arena_bytes();
  s.arena_used_bytes = r->arena_used_bytes();
  s.connections = r->connections();
  s.offload_writes = r->offload_writes();
  s.unload_writes = r->unload_writes();
  s.staging_memory = r->staging_memory();
  s.transport = r->transport();
  s.fsync = r->fsync();
  s.log_records = r->log_records();
  s.log_syncs = r->log_syncs();
  s.log_failure = r->log_failure();
  return s;
}

}  // namespace unloadkv
