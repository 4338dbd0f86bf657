#include "server/kv_service.h"

#include "absl/strings/str_cat.h"
#include "transport/base/object_pool.h"
#include "transport/rpc/auth_file.h"

namespace unloadkv::server {
namespace {

absl::Status NotPrimary(absl::string_view what) {
  return absl::AbortedError(
      absl::StrCat("this node is not the serving primary of ", what, "; refresh the map"));
}

// The roles that may call `method` (rpc::Role bits; a user needs one of them).
uint32_t RolesFor(proto::Method method) {
  switch (method) {
    case proto::GRANT:
    case proto::PUT:
    case proto::GET:
    case proto::DELETE:
    case proto::SCAN:
      return rpc::kRoleClient;  // admins hold it too
    case proto::REPLICA_ATTACH:
    case proto::REPLICATE:
      return rpc::kRoleNode;
    default:
      return rpc::kAllRoles;  // STATS, PING
  }
}

}  // namespace

KvService::KvService(ShardTable* shards, ServerMetrics* metrics, const Clock* clock, Hooks hooks)
    : shards_(shards), metrics_(metrics), clock_(clock), hooks_(std::move(hooks)) {}

absl::Status KvService::Deny(proto::Method method, const Peer& peer, absl::string_view reason,
                             absl::string_view why) {
  if (metrics_ != nullptr) metrics_->OnDenied(method, reason);
  const std::string who = absl::StrCat("user \"", peer.user, "\" (", rpc::RoleNames(peer.roles),
                                       ", connection ", peer.id, ")");
  denials_log_.Log(LogLevel::kWarning, absl::StrCat("kvserver: denied ", proto::Method_Name(method),
                                                    " from ", who, ": ", why));
  return absl::PermissionDeniedError(absl::StrCat(proto::Method_Name(method), " denied: ", why));
}

namespace {

// This thread's buffer for an answer being serialized: Responder::Reply copies it.
std::string& AnswerBuffer() {
  thread_local std::string buffer;
  return buffer;
}

// A pooled Call keeps the capacity of its messages' strings, but not past this (a large value
// read would otherwise stay allocated in every spare).
constexpr size_t kMaxKeptMessageBytes = 64 * 1024;

}  // namespace

template <typename Req, typename Resp>
void KvService::Finish(Call<Req, Resp>* c, const absl::Status& status) {
  KvService* s = c->service;
  if (s->metrics_ != nullptr) s->metrics_->OnRpc(c->method, status, s->clock_->Now() - c->start);
  if (status.ok()) {
    std::string& bytes = AnswerBuffer();
    c->resp.SerializeToString(&bytes);
    c->responder.Reply(status, bytes);
    if (bytes.capacity() > kMaxKeptMessageBytes) std::string().swap(bytes);
  } else {
    c->responder.Reply(status);
  }
  ObjectPool<Call<Req, Resp>>::Give(c, [](Call<Req, Resp>& v) {
    v.service = nullptr;
    v.responder = rpc::Responder();
    v.replica.reset();
    if (v.req.ByteSizeLong() + v.resp.ByteSizeLong() > kMaxKeptMessageBytes) {
      v.req = Req();
      v.resp = Resp();
    } else {
      v.req.Clear();
      v.resp.Clear();
    }
    ++v.generation;
  });
}

template <typename Req, typename Resp>
KvService::Call<Req, Resp>* KvService::Begin(proto::Method method, absl::string_view bytes,
                                             rpc::Responder r) {
  Call<Req, Resp>* c = ObjectPool<Call<Req, Resp>>::Take();
  c->service = this;
  c->method = method;
  c->start = clock_->Now();
  c->responder = std::move(r);
  const Peer& peer = c->responder.peer_identity();
  if (stopping_) {
    Finish(c, absl::UnavailableError("server shutting down"));
  } else if ((peer.roles & RolesFor(method)) == 0) {
    Finish(c, Deny(method, peer, "role",
                   absl::StrCat("user \"", peer.user, "\" holds role ", rpc::RoleNames(peer.roles),
                                "; ", proto::Method_Name(method), " needs ",
                                rpc::RoleNames(RolesFor(method)))));
  } else if (!c->req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    Finish(c, absl::InvalidArgumentError(
                  absl::StrCat(proto::Method_Name(method), ": request does not parse")));
  } else {
    return c;
  }
  return nullptr;
}

template <typename Req, typename Resp>
void KvService::Register(rpc::RpcServer* rpc, proto::Method method,
                         void (KvService::*fn)(Call<Req, Resp>* c)) {
  const bool node_request = RolesFor(method) == rpc::kRoleNode;
  rpc->Register(method, [this, method, fn, node_request](absl::string_view b, rpc::Responder r) {
    // Node-to-node requests: unanswered during an injected network cut.
    if (node_request && hooks_.network_cut != nullptr && hooks_.network_cut->load()) return;
    if (Call<Req, Resp>* c = Begin<Req, Resp>(method, b, std::move(r))) (this->*fn)(c);
  });
}

template <typename Req, typename Resp>
void KvService::Register(rpc::RpcServer* rpc, proto::Method method,
                         void (KvService::*fn)(const Peer&, const Req&, Reply<Resp>)) {
  const bool node_request = RolesFor(method) == rpc::kRoleNode;
  rpc->Register(method, [this, method, fn, node_request](absl::string_view b, rpc::Responder r) {
    if (node_request && hooks_.network_cut != nullptr && hooks_.network_cut->load()) return;
    Call<Req, Resp>* c = Begin<Req, Resp>(method, b, std::move(r));
    if (c == nullptr) return;
    // The Reply points to the Call; a second one (a handler's bug) finds it given back and
    // does nothing, where the Call was not reused since.
    const uint64_t generation = c->generation;
    (this->*fn)(c->responder.peer_identity(), c->req, [c, generation](absl::StatusOr<Resp> resp) {
      if (c->generation != generation || c->service == nullptr) {
        Log(LogLevel::kError, "kvserver: a request was answered twice");
        return;
      }
      if (resp.ok()) c->resp = std::move(*resp);
      Finish(c, resp.status());
    });
  });
}

void KvService::RegisterWith(rpc::RpcServer* rpc) {
  Register(rpc, proto::GRANT, &KvService::Grant);
  Register(rpc, proto::PUT, &KvService::Put);
  Register(rpc, proto::GET, &KvService::Get);
  Register(rpc, proto::DELETE, &KvService::Delete);
  Register(rpc, proto::SCAN, &KvService::Scan);
  Register(rpc, proto::STATS, &KvService::Stats);
  Register(rpc, proto::PING, &KvService::Ping);
  Register(rpc, proto::REPLICA_ATTACH, &KvService::Attach);
  Register(rpc, proto::REPLICATE, &KvService::Replicate);
}

void KvService::Ping(const Peer&, const proto::PingRequest&, Reply<proto::PingResponse> reply) {
  reply(proto::PingResponse());
}

void KvService::Read(const std::shared_ptr<ShardReplica>& replica,
                     std::function<void(absl::Status)> read) {
  if (hooks_.lease_valid()) return read(absl::OkStatus());
  replica->Barrier(std::move(read));
}

void KvService::Grant(GrantCall* c) {
  const proto::GrantRequest& req = c->req;
  const uint64_t peer_id = c->responder.peer();
  GrantWindows* windows = hooks_.grant_windows;
  // Read before the role: a demotion after this point fails the Bind below.
  const uint64_t generation = windows != nullptr ? windows->Generation(req.shard()) : 0;
  c->replica = shards_->Get(req.shard());
  ShardReplica* replica = c->replica.get();
  if (replica == nullptr || replica->role() != ShardReplica::Role::kPrimary) {
    return Finish(c, NotPrimary(absl::StrCat("shard ", req.shard())));
  }
  bool over_quota = false;
  absl::StatusOr<std::vector<KvStore::Grant>> grants =
      replica->store().GrantSlots(peer_id, req.size(), req.count(), &over_quota);
  if (over_quota && metrics_ != nullptr) metrics_->OnGrantRefused("connection_quota");
  if (!grants.ok()) return Finish(c, grants.status());
  const bool windowed = windows != nullptr && replica->protected_memory();
  for (const KvStore::Grant& g : *grants) {
    proto::SlotGrant* pg = c->resp.add_grants();  // reuses the pooled answer's grants
    pg->set_grant_id(g.id);
    pg->set_addr(replica->arena_addr() + g.slot.offset);
    pg->set_rkey(replica->arena_rkey());  // a window's key, when windowed, below
    pg->set_capacity(g.slot.capacity);
    pg->set_window(windowed);
  }
  if (!windowed) return Finish(c, absl::OkStatus());
  // Each grant a window onto exactly its slot, on this client's connection; its staged writes
  // are checked against the same grants.
  std::shared_ptr<engine::Connection> conn = c->responder.peer_identity().connection.lock();
  if (conn == nullptr) {
    for (const KvStore::Grant& g : *grants) replica->store().RevokeGrant(peer_id, g.id);
    return Finish(c, absl::UnavailableError("GRANT: the connection is closing"));
  }
  conn->SetStagedWriteCheck(windows->ChecksFor(peer_id));
  windows->Bind(conn, peer_id, replica->id(), generation, replica->store(), *grants,
                replica->arena_region(), [c](absl::StatusOr<std::vector<uint32_t>> keys) {
                  if (!keys.ok()) return Finish(c, keys.status());
                  for (size_t i = 0; i < keys->size() && i < size_t(c->resp.grants_size()); ++i) {
                    c->resp.mutable_grants(static_cast<int>(i))->set_rkey((*keys)[i]);
                  }
                  Finish(c, absl::OkStatus());
                });
}

void KvService::Put(PutCall* c) {
  const proto::PutRequest& req = c->req;
  if (absl::Status st = proto::CheckKey(req.key()); !st.ok()) return Finish(c, st);
  if (absl::Status st = CheckInline(req); !st.ok()) return Finish(c, st);
  c->replica = shards_->PrimaryFor(req.key());
  if (c->replica == nullptr) return Finish(c, NotPrimary("the key's shard"));
  if (c->replica->id() != req.shard()) {
    return Finish(c, absl::AbortedError(absl::StrCat("the key is in shard ", c->replica->id(),
                                                     ", not in shard ", req.shard(),
                                                     " that the PUT names; refresh the map")));
  }
  if (req.has_value()) return PublishInline(c);
  if (hooks_.grant_windows == nullptr) return Publish(c);
  // The grant's window ends before its value is published: no byte lands in a published slot.
  if (absl::Status st = hooks_.grant_windows->Release(c->responder.peer(), c->replica->id(),
                                                      req.grant_id(), [this, c] { Publish(c); });
      !st.ok()) {
    Finish(c, st);
  }
}

absl::Status KvService::CheckInline(const proto::PutRequest& req) {
  if (!req.has_value()) return absl::OkStatus();
  const size_t size = req.value().size();
  if (size > proto::kMaxInlineValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("inline value of ", size, " bytes; inline values are at most ",
                     proto::kMaxInlineValueBytes, " bytes (write larger ones through a grant)"));
  }
  if (req.value_size() != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("value_size says ", req.value_size(), " bytes, the inline value has ", size));
  }
  if (req.grant_id() != 0) {
    return absl::InvalidArgumentError("an inline PUT names no grant (grant_id must be 0)");
  }
  return absl::OkStatus();
}

void KvService::PublishInline(PutCall* c) {
  const proto::PutRequest& req = c->req;
  // Copied into a slot of the store's own, as a state transfer's values are (version 0: the
  // store's next), or merged into the key's record as a granted merge is.
  KvStore& store = c->replica->store();
  absl::StatusOr<KvStore::Mutation> m = req.merge_fields()
                                            ? store.PrepareMergeCopy(req.key(), req.value())
                                            : store.PrepareCopy(req.key(), req.value(), 0);
  if (!m.ok()) return Finish(c, m.status());
  Commit(c, std::move(*m), proto::INLINE);
}

void KvService::Publish(PutCall* c) {
  const proto::PutRequest& req = c->req;
  const uint64_t peer_id = c->responder.peer();
  KvStore& store = c->replica->store();
  absl::StatusOr<KvStore::Mutation> m =
      req.merge_fields() ? store.PrepareMerge(peer_id, req.key(), req.grant_id(), req.value_size())
                         : store.PreparePut(peer_id, req.key(), req.grant_id(), req.value_size());
  if (!m.ok()) return Finish(c, m.status());
  // A granted write's path as the client saw it (never INLINE: that PUT carries its value).
  const proto::WritePath path =
      proto::WritePath_IsValid(req.value_path()) && req.value_path() != proto::INLINE
          ? req.value_path()
          : proto::PATH_UNKNOWN;
  Commit(c, std::move(*m), path);
}

void KvService::Commit(PutCall* c, KvStore::Mutation m, proto::WritePath path) {
  value_writes_[path].fetch_add(1, std::memory_order_relaxed);
  if (metrics_ != nullptr) metrics_->OnValueWrite(path);
  c->replica->Submit(std::move(m), [c](absl::StatusOr<uint64_t> v) {
    if (!v.ok()) return Finish(c, v.status());
    c->resp.set_version(*v);
    Finish(c, absl::OkStatus());
  });
}

void KvService::Get(GetCall* c) {
  if (absl::Status st = proto::CheckKey(c->req.key()); !st.ok()) return Finish(c, st);
  c->replica = shards_->PrimaryFor(c->req.key());
  if (c->replica == nullptr) return Finish(c, NotPrimary("the key's shard"));
  Read(c->replica, [c](absl::Status ok) {
    if (!ok.ok()) return Finish(c, ok);
    absl::StatusOr<uint64_t> version =
        c->replica->store().GetInto(c->req.key(), c->resp.mutable_value());
    if (!version.ok()) return Finish(c, version.status());
    c->resp.set_version(*version);
    Finish(c, absl::OkStatus());
  });
}

void KvService::Delete(const Peer&, const proto::DeleteRequest& req,
                       Reply<proto::DeleteResponse> reply) {
  if (absl::Status st = proto::CheckKey(req.key()); !st.ok()) return reply(st);
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.key());
  if (replica == nullptr) return reply(NotPrimary("the key's shard"));
  absl::StatusOr<KvStore::Mutation> m = replica->store().PrepareDelete(req.key());
  if (!m.ok()) return reply(m.status());
  replica->Submit(std::move(*m), [reply](absl::StatusOr<uint64_t> v) {
    if (!v.ok()) return reply(v.status());
    proto::DeleteResponse resp;
    resp.set_version(*v);
    reply(std::move(resp));
  });
}

void KvService::Scan(const Peer&, const proto::ScanRequest& req, Reply<proto::ScanResponse> reply) {
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.start_key());
  if (replica == nullptr || !replica->ContainsRange(req.start_key(), req.end_key())) {
    return reply(NotPrimary("the scanned range (a scan stays within one shard)"));
  }
  Read(replica, [replica, req, reply](absl::Status ok) {
    if (!ok.ok()) return reply(ok);
    absl::StatusOr<KvStore::ScanResult> r =
        replica->store().Scan(req.start_key(), req.end_key(), req.limit());
    if (!r.ok()) return reply(r.status());
    proto::ScanResponse resp;
    for (auto& [k, v] : r->items) {
      resp.add_keys(std::move(k));
      resp.add_values(std::move(v));
    }
    resp.set_more(r->more);
    reply(std::move(resp));
  });
}

void KvService::Stats(const Peer&, const proto::StatsRequest&, Reply<proto::StatsResponse> reply) {
  proto::StatsResponse resp;
  for (const std::shared_ptr<ShardReplica>& r : shards_->All()) {
    if (r->role() != ShardReplica::Role::kPrimary) continue;
    KvStore::Stats s = r->store().stats();
    resp.set_keys(resp.keys() + s.keys);
    resp.set_arena_bytes(resp.arena_bytes() + s.arena_bytes);
    resp.set_arena_used_bytes(resp.arena_used_bytes() + s.arena_used_bytes);
  }
  resp.set_offload_writes(value_writes(proto::OFFLOAD));
  resp.set_unload_writes(value_writes(proto::UNLOAD));
  resp.set_inline_writes(value_writes(proto::INLINE));
  if (hooks_.fill_stats) hooks_.fill_stats(&resp);
  reply(std::move(resp));
}

absl::Status KvService::AuthorizeNode(proto::Method method, const Peer& peer, uint32_t shard,
                                      uint64_t epoch) {
  if (!hooks_.authorize_node) {
    return Deny(method, peer, "no_cluster",
                "this is a single node (no --etcd): it takes no replication");
  }
  std::string reason = "not_primary";
  absl::Status st =
      hooks_.authorize_node(peer.user, shard, epoch, method == proto::REPLICA_ATTACH, &reason);
  return st.ok() ? st : Deny(method, peer, reason, st.message());
}

void KvService::Attach(const Peer& peer, const proto::AttachRequest& req,
                       Reply<proto::AttachResponse> reply) {
  // Checked before any replica exists: a request the map does not back maps no arena.
  if (absl::Status st = AuthorizeNode(proto::REPLICA_ATTACH, peer, req.shard(), req.epoch());
      !st.ok()) {
    return reply(st);
  }
  absl::StatusOr<std::shared_ptr<ShardReplica>> replica = shards_->GetOrCreate(req.shard());
  if (!replica.ok()) return reply(replica.status());
  proto::AttachRequest checked = req;
  checked.set_primary(peer.user);  // logged as who proved it, not as what it claims
  absl::StatusOr<proto::AttachResponse> resp = (*replica)->Attach(checked, peer.id);
  if (!resp.ok() || !(*replica)->protected_memory()) return reply(resp);
  // The primary writes the mirror through a window bound on its own connection only.
  std::shared_ptr<engine::Connection> conn = peer.connection.lock();
  if (conn == nullptr) return reply(absl::UnavailableError("REPLICA_ATTACH: connection closing"));
  (*replica)->BindMirror(conn, peer.id,
                         [resp = *resp, reply](absl::StatusOr<uint32_t> key) mutable {
                           if (!key.ok()) return reply(key.status());
                           resp.set_arena_rkey(*key);
                           reply(std::move(resp));
                         });
}

void KvService::Replicate(const Peer& peer, const proto::ReplicateRequest& req,
                          Reply<proto::ReplicateResponse> reply) {
  if (absl::Status st = AuthorizeNode(proto::REPLICATE, peer, req.shard(), req.epoch()); !st.ok()) {
    return reply(st);
  }
  std::shared_ptr<ShardReplica> replica = shards_->Get(req.shard());
  if (replica == nullptr) {
    return reply(absl::AbortedError(absl::StrCat("shard ", req.shard(), " is not held here")));
  }
  // The replica applies records only from the connection of the primary it attached to.
  // With a log, it answers once the records are logged (ShardReplica::Apply).
  replica->Apply(req, peer.id,
                 [reply](absl::StatusOr<proto::ReplicateResponse> r) { reply(std::move(r)); });
}

}  // namespace unloadkv::server
