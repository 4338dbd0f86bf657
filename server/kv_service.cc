#include "server/kv_service.h"

#include "absl/strings/str_cat.h"
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

template <typename Req, typename Resp>
void KvService::Handle(proto::Method method, absl::string_view bytes, rpc::Responder r,
                       void (KvService::*fn)(const Peer&, const Req&, Reply<Resp>)) {
  const absl::Time start = clock_->Now();
  auto reply = [this, method, start, r](absl::StatusOr<Resp> resp) mutable {
    if (metrics_ != nullptr) metrics_->OnRpc(method, resp.status(), clock_->Now() - start);
    if (resp.ok()) {
      r.Reply(absl::OkStatus(), resp->SerializeAsString());
    } else {
      r.Reply(resp.status());
    }
  };
  const Peer& peer = r.peer_identity();
  Req req;
  if (stopping_) {
    reply(absl::UnavailableError("server shutting down"));
  } else if ((peer.roles & RolesFor(method)) == 0) {
    reply(Deny(
        method, peer, "role",
        absl::StrCat("user \"", peer.user, "\" holds role ", rpc::RoleNames(peer.roles), "; ",
                     proto::Method_Name(method), " needs ", rpc::RoleNames(RolesFor(method)))));
  } else if (!req.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    reply(absl::InvalidArgumentError(
        absl::StrCat(proto::Method_Name(method), ": request does not parse")));
  } else {
    (this->*fn)(peer, req, std::move(reply));
  }
}

template <typename Req, typename Resp>
void KvService::Register(rpc::RpcServer* rpc, proto::Method method,
                         void (KvService::*fn)(const Peer&, const Req&, Reply<Resp>)) {
  const bool node_request = RolesFor(method) == rpc::kRoleNode;
  rpc->Register(method, [this, method, fn, node_request](absl::string_view b, rpc::Responder r) {
    // Node-to-node requests: unanswered during an injected network cut.
    if (node_request && hooks_.network_cut != nullptr && hooks_.network_cut->load()) return;
    Handle(method, b, std::move(r), fn);
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

void KvService::Grant(const Peer& peer, const proto::GrantRequest& req,
                      Reply<proto::GrantResponse> reply) {
  GrantWindows* windows = hooks_.grant_windows;
  // Read before the role: a demotion after this point fails the Bind below.
  const uint64_t generation = windows != nullptr ? windows->Generation(req.shard()) : 0;
  std::shared_ptr<ShardReplica> replica = shards_->Get(req.shard());
  if (replica == nullptr || replica->role() != ShardReplica::Role::kPrimary) {
    return reply(NotPrimary(absl::StrCat("shard ", req.shard())));
  }
  bool over_quota = false;
  absl::StatusOr<std::vector<KvStore::Grant>> grants =
      replica->store().GrantSlots(peer.id, req.size(), req.count(), &over_quota);
  if (over_quota && metrics_ != nullptr) metrics_->OnGrantRefused("connection_quota");
  if (!grants.ok()) return reply(grants.status());
  const bool windowed = windows != nullptr && replica->protected_memory();
  auto answer = [replica, reply, windowed, grants = *grants](const std::vector<uint32_t>& keys) {
    proto::GrantResponse resp;
    for (size_t i = 0; i < grants.size(); ++i) {
      proto::SlotGrant* pg = resp.add_grants();
      pg->set_grant_id(grants[i].id);
      pg->set_addr(replica->arena_addr() + grants[i].slot.offset);
      pg->set_rkey(keys[i]);
      pg->set_capacity(grants[i].slot.capacity);
      pg->set_window(windowed);
    }
    reply(std::move(resp));
  };
  if (!windowed) {
    return answer(std::vector<uint32_t>(grants->size(), replica->arena_rkey()));
  }
  // Each grant a window onto exactly its slot, on this client's connection; its staged writes
  // are checked against the same grants.
  std::shared_ptr<engine::Connection> conn = peer.connection.lock();
  if (conn == nullptr) {
    for (const KvStore::Grant& g : *grants) replica->store().RevokeGrant(peer.id, g.id);
    return reply(absl::UnavailableError("GRANT: the connection is closing"));
  }
  conn->SetStagedWriteCheck(windows->ChecksFor(peer.id));
  windows->Bind(conn, peer.id, replica->id(), generation, replica->store(), *grants,
                replica->arena_region(),
                [answer, reply](absl::StatusOr<std::vector<uint32_t>> keys) {
                  if (!keys.ok()) return reply(keys.status());
                  answer(*keys);
                });
}

void KvService::Put(const Peer& peer, const proto::PutRequest& req,
                    Reply<proto::PutResponse> reply) {
  if (absl::Status st = proto::CheckKey(req.key()); !st.ok()) return reply(st);
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.key());
  if (replica == nullptr) return reply(NotPrimary("the key's shard"));
  if (replica->id() != req.shard()) {
    return reply(absl::AbortedError(absl::StrCat("the key is in shard ", replica->id(),
                                                 ", not in shard ", req.shard(),
                                                 " whose grant the PUT names; refresh the map")));
  }
  auto publish = [this, peer_id = peer.id, replica, req, reply] {
    absl::StatusOr<KvStore::Mutation> m =
        req.merge_fields()
            ? replica->store().PrepareMerge(peer_id, req.key(), req.grant_id(), req.value_size())
            : replica->store().PreparePut(peer_id, req.key(), req.grant_id(), req.value_size());
    if (!m.ok()) return reply(m.status());
    const int path = proto::WritePath_IsValid(req.value_path()) ? req.value_path() : 0;
    value_writes_[path].fetch_add(1, std::memory_order_relaxed);
    if (metrics_ != nullptr) metrics_->OnValueWrite(static_cast<proto::WritePath>(path));
    replica->Submit(std::move(*m), [reply](absl::StatusOr<uint64_t> v) {
      if (!v.ok()) return reply(v.status());
      proto::PutResponse resp;
      resp.set_version(*v);
      reply(std::move(resp));
    });
  };
  if (hooks_.grant_windows == nullptr) return publish();
  // The grant's window ends before its value is published: no byte lands in a published slot.
  if (absl::Status st =
          hooks_.grant_windows->Release(peer.id, replica->id(), req.grant_id(), publish);
      !st.ok()) {
    reply(st);
  }
}

void KvService::Get(const Peer&, const proto::GetRequest& req, Reply<proto::GetResponse> reply) {
  if (absl::Status st = proto::CheckKey(req.key()); !st.ok()) return reply(st);
  std::shared_ptr<ShardReplica> replica = shards_->PrimaryFor(req.key());
  if (replica == nullptr) return reply(NotPrimary("the key's shard"));
  Read(replica, [replica, key = req.key(), reply](absl::Status ok) {
    if (!ok.ok()) return reply(ok);
    absl::StatusOr<KvStore::Value> v = replica->store().Get(key);
    if (!v.ok()) return reply(v.status());
    proto::GetResponse resp;
    resp.set_value(std::move(v->bytes));
    resp.set_version(v->version);
    reply(std::move(resp));
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
