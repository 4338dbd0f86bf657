#include "server/replica_link.h"

#include "absl/strings/str_cat.h"
#include "proto/kv.pb.h"
#include "transport/base/buggify.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv::server {

absl::StatusOr<std::shared_ptr<ReplicaLink>> ReplicaLink::Open(
    engine::Engine* engine, const std::string& policy, const std::string& node,
    const std::string& address, const rpc::Credentials* credentials, absl::Duration timeout,
    const Clock* clock, const std::atomic<bool>* cut, LinkMetrics* metrics, const LinkEnv& env) {
  auto p = engine::MakePolicy(policy);
  if (!p.ok()) return p.status();
  auto conn = engine->CreateConnection(std::move(*p), engine::Engine::Role::kRequests);
  if (!conn.ok()) return conn.status();
  std::shared_ptr<ReplicaLink> link(new ReplicaLink());
  link->node_ = node;
  link->address_ = address;
  link->cut_ = cut;
  link->metrics_ = metrics;
  link->env_ = env;
  if (cut != nullptr && cut->load()) {
    return absl::UnavailableError(absl::StrCat("node ", node, ": network cut injected"));
  }
  link->conn_ = std::move(*conn);
  link->rpc_ = std::make_unique<rpc::RpcClient>(link->conn_.get(), clock, kMaxOutstanding + 8);
  const absl::Time deadline = clock->Now() + timeout;
  absl::StatusOr<rpc::Session> session =
      rpc::Bootstrap(env.dial, address, credentials,
                     engine::EncodeConnectionInfo(link->conn_->local_info()), timeout);
  if (!session.ok()) {
    return absl::Status(session.status().code(),
                        absl::StrCat("connecting to node ", node, " at ", address, ": ",
                                     session.status().message()));
  }
  auto remote = engine::DecodeConnectionInfo(session->remote_info);
  if (!remote.ok()) return remote.status();
  remote->qp.token = session->token;
  if (absl::Status st = link->conn_->Connect(*remote); !st.ok()) return st;
  // The first message: admission releases a connection that sends none in time.
  absl::StatusOr<std::string> ping =
      link->CallAndWait(proto::PING, proto::PingRequest().SerializeAsString(),
                        std::max(deadline - clock->Now(), absl::Milliseconds(1)));
  if (!ping.ok()) {
    return absl::Status(ping.status().code(),
                        absl::StrCat("node ", node, " at ", address,
                                     ": first round trip: ", ping.status().message()));
  }
  return link;
}

ReplicaLink::~ReplicaLink() {
  std::deque<Item> left;
  {
    MutexLock l(&mu_);
    left.swap(queue_);
    draining_ = true;  // nothing is sent from here on (see Flush and Send's completion)
  }
  rpc_.reset();  // fails what is outstanding with CANCELLED
  for (Item& it : left) it.done(absl::CancelledError("replica link closed"));
}

absl::StatusOr<std::string> ReplicaLink::CallAndWait(uint16_t method, std::string request,
                                                     absl::Duration timeout) {
  if (env_.wait) return rpc_->CallAndWait(method, std::move(request), timeout, env_.wait);
  return rpc_->CallAndWait(method, std::move(request), timeout);
}

absl::Status ReplicaLink::Attach(const proto::AttachRequest& request, absl::Duration timeout) {
  absl::StatusOr<std::string> bytes =
      CallAndWait(proto::REPLICA_ATTACH, request.SerializeAsString(), timeout);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("attaching shard ", request.shard(), " on node ", node_, ": ",
                                     bytes.status().message()));
  }
  proto::AttachResponse resp;
  if (!resp.ParseFromString(*bytes)) {
    return absl::DataLossError(absl::StrCat("node ", node_, ": attach answer does not parse"));
  }
  arena_addr_ = resp.arena_addr();
  arena_rkey_ = resp.arena_rkey();
  attached_ = resp;
  return absl::OkStatus();
}

void ReplicaLink::Hold(std::shared_ptr<void> resource) {
  MutexLock l(&mu_);
  held_.push_back(std::move(resource));
}

size_t ReplicaLink::queued() const {
  MutexLock l(&mu_);
  return queue_.size() + static_cast<size_t>(outstanding_);
}

void ReplicaLink::Push(Item item) {
  MutexLock l(&mu_);
  queue_.push_back(std::move(item));
  if (metrics_ != nullptr) {
    metrics_->in_flight->Set(static_cast<double>(queue_.size() + outstanding_));
  }
}

void ReplicaLink::Flush() {
  {
    MutexLock l(&mu_);
    if (draining_ || queue_.empty()) return;
    draining_ = true;
  }
  Drain();
}

void ReplicaLink::Drain() {
  // Only one thread drains at a time (draining_), so items leave in queue order.
  while (true) {
    Item item;
    {
      MutexLock l(&mu_);
      // Fault point: as if the window were full; the items wait for the next Flush.
      if (queue_.empty() || outstanding_ >= kMaxOutstanding || (cut_ != nullptr && cut_->load()) ||
          UNLOADKV_BUGGIFY("replication: the window is full")) {
        draining_ = false;
        return;
      }
      item = std::move(queue_.front());
      queue_.pop_front();
      ++outstanding_;
    }
    Send(std::move(item));
  }
}

void ReplicaLink::Send(Item item) {
  auto done = std::make_shared<decltype(item.done)>(std::move(item.done));
  auto finish = [this, done](absl::StatusOr<proto::ReplicateResponse> r) {
    (*done)(std::move(r));
    bool restart = false;
    {
      MutexLock l(&mu_);
      --outstanding_;
      if (!draining_ && !queue_.empty()) restart = draining_ = true;
      if (metrics_ != nullptr) {
        metrics_->in_flight->Set(static_cast<double>(queue_.size() + outstanding_));
      }
    }
    if (restart) Drain();
  };
  absl::Status failure;
  {
    // The writes and the request leave together (one doorbell); the batch ends before an
    // error is reported.
    engine::Connection::Batch batch = conn_->BeginBatch();
    for (const ValueWrite& w : item.writes) {
      engine::WriteOptions lazy;  // the REPLICATE answer confirms the write
      lazy.lazy_completion = true;
      LinkMetrics* m = metrics_;
      failure = conn_->Write(
          w.local, arena_addr_ + w.remote_offset, arena_rkey_,
          [m](const engine::WriteResult& r) {
            if (m != nullptr && r.ok()) m->writes[static_cast<int>(r.path)]->Increment();
          },
          nullptr, lazy);
      if (!failure.ok()) break;
    }
    if (failure.ok()) {
      if (metrics_ != nullptr) metrics_->requests->Increment();
      absl::StatusOr<uint64_t> id =
          rpc_->Call(proto::REPLICATE, item.request.SerializeAsString(), kRequestTimeout,
                     [finish](absl::StatusOr<std::string> bytes) {
                       if (!bytes.ok()) return finish(bytes.status());
                       proto::ReplicateResponse resp;
                       if (!resp.ParseFromString(*bytes)) {
                         return finish(absl::DataLossError("REPLICATE answer does not parse"));
                       }
                       finish(resp);
                     });
      failure = id.status();
    }
  }
  if (!failure.ok()) {
    finish(absl::UnavailableError(absl::StrCat("node ", node_, ": ", failure.message())));
  }
}

void ReplicaLink::CheckDeadlines() { rpc_->CheckDeadlines(); }

}  // namespace unloadkv::server
