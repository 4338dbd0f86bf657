#include "tests/kv/raw_connection.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/limits.h"
#include "transport/backends/open_device.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv::testing {
namespace {

// A soft device and an engine on it, configured as the SDK's (message size).
absl::Status OpenEngine(bool huge_pages, std::unique_ptr<rnic::Device>* device,
                        std::unique_ptr<engine::Engine>* engine) {
  auto dev = backends::OpenDevice({});
  if (!dev.ok()) return dev.status();
  *device = std::move(*dev);
  engine::EngineOptions eo;
  eo.max_message_bytes = proto::kMaxMessageBytes;
  eo.huge_pages = huge_pages;
  auto e = engine::Engine::Create(device->get(), eo);
  if (!e.ok()) return e.status();
  *engine = std::move(*e);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RawConnection>> RawConnection::Open(
    const std::string& server, const rpc::Credentials* credentials, engine::Path path) {
  std::unique_ptr<RawConnection> r(new RawConnection());
  if (absl::Status st = OpenEngine(true, &r->device_, &r->engine_); !st.ok()) return st;
  r->buf_.assign(proto::kMaxValueBytes, 0);
  auto mr = r->engine_->RegisterMemory(r->buf_.data(), r->buf_.size(), rnic::kLocalWrite);
  if (!mr.ok()) return mr.status();
  r->mr_ = std::move(*mr);
  std::unique_ptr<engine::PathPolicy> policy;
  if (path == engine::Path::kUnload) {
    policy = std::make_unique<engine::UnloadPolicy>();
  } else {
    policy = std::make_unique<engine::OffloadPolicy>();
  }
  auto conn = r->engine_->CreateConnection(std::move(policy));
  if (!conn.ok()) return conn.status();
  r->conn_ = std::move(*conn);
  r->rpc_ = std::make_unique<rpc::RpcClient>(r->conn_.get(), RealClock::Get());
  auto session =
      rpc::Bootstrap(nullptr, server, credentials,
                     engine::EncodeConnectionInfo(r->conn_->local_info()), absl::Seconds(5));
  if (!session.ok()) return session.status();
  auto info = engine::DecodeConnectionInfo(session->remote_info);
  if (!info.ok()) return info.status();
  info->qp.token = session->token;
  if (absl::Status st = r->conn_->Connect(*info); !st.ok()) return st;
  r->engine_->Start();
  return r;
}

RawConnection::~RawConnection() {
  if (engine_) engine_->Stop();
  rpc_.reset();
  conn_.reset();
}

absl::StatusOr<std::string> RawConnection::Call(uint16_t method, const std::string& payload) {
  return rpc_->CallAndWait(method, payload, absl::Seconds(5));
}

absl::StatusOr<proto::SlotGrant> RawConnection::Grant(uint32_t size, uint32_t shard) {
  proto::GrantRequest req;
  req.set_shard(shard);
  req.set_size(size);
  req.set_count(1);
  auto bytes = Call(proto::GRANT, req);
  if (!bytes.ok()) return bytes.status();
  proto::GrantResponse resp;
  if (!resp.ParseFromString(*bytes) || resp.grants_size() != 1) {
    return absl::InternalError("bad GrantResponse");
  }
  return resp.grants(0);
}

absl::Status RawConnection::WriteValue(const proto::SlotGrant& g, const std::string& value) {
  absl::StatusOr<engine::WriteResult> r = WriteRaw(g.addr(), g.rkey(), value);
  if (!r.ok()) return r.status();
  return r->ok() ? absl::OkStatus()
                 : absl::InternalError(
                       absl::StrCat("value write failed: ", rnic::WcStatusName(r->status)));
}

absl::StatusOr<engine::WriteResult> RawConnection::WriteRaw(uint64_t addr, uint32_t rkey,
                                                            const std::string& bytes) {
  std::memcpy(buf_.data(), bytes.data(), bytes.size());
  // Shared with the callback, which may run after a call that timed out.
  struct Outcome {
    std::atomic<bool> done{false};
    engine::WriteResult result;
  };
  auto out = std::make_shared<Outcome>();
  absl::Status st = conn_->Write(mr_->Sge(0, static_cast<uint32_t>(bytes.size())), addr, rkey,
                                 [out](const engine::WriteResult& r) {
                                   out->result = r;
                                   out->done.store(true, std::memory_order_release);
                                 });
  if (!st.ok()) return st;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!out->done.load(std::memory_order_acquire) && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(50));
  }
  if (!out->done.load(std::memory_order_acquire)) {
    return absl::DeadlineExceededError("the write did not complete within 5 s");
  }
  return out->result;
}

absl::Status RawConnection::Put(const std::string& key, uint64_t grant_id, uint32_t size,
                                uint32_t invalidate_rkey, uint32_t shard) {
  proto::PutRequest req;
  req.set_key(key);
  req.set_grant_id(grant_id);
  req.set_shard(shard);
  req.set_value_size(size);
  engine::SendOptions send;
  send.invalidate_rkey = invalidate_rkey;
  return rpc_->CallAndWait(proto::PUT, req.SerializeAsString(), absl::Seconds(5), send).status();
}

absl::Status RawConnection::SendRaw(const std::string& bytes) {
  return conn_->Send(bytes, nullptr);
}

absl::StatusOr<std::unique_ptr<HalfOpenPeer>> HalfOpenPeer::Create() {
  std::unique_ptr<HalfOpenPeer> p(new HalfOpenPeer());
  if (absl::Status st = OpenEngine(false, &p->device_, &p->engine_); !st.ok()) return st;
  p->engine_->Start();  // accepts the server's streams; nothing is ever sent on them
  return p;
}

HalfOpenPeer::~HalfOpenPeer() {
  conns_.clear();
  if (engine_) engine_->Stop();
}

absl::StatusOr<std::string> HalfOpenPeer::Info(const std::string& address) {
  auto conn = engine_->CreateConnection(std::make_unique<engine::OffloadPolicy>());
  if (!conn.ok()) return conn.status();
  engine::ConnectionInfo info = (*conn)->local_info();
  info.qp.address = address;
  conns_.push_back(std::move(*conn));
  return engine::EncodeConnectionInfo(info);
}

absl::StatusOr<std::string> HalfOpenPeer::Hello(const std::string& server,
                                                const std::string& address) {
  auto conn = engine_->CreateConnection(std::make_unique<engine::OffloadPolicy>());
  if (!conn.ok()) return conn.status();
  engine::ConnectionInfo info = (*conn)->local_info();
  if (!address.empty()) info.qp.address = address;
  conns_.push_back(std::move(*conn));
  absl::StatusOr<rpc::Session> session = rpc::Bootstrap(
      nullptr, server, nullptr, engine::EncodeConnectionInfo(info), absl::Seconds(5));
  if (!session.ok()) return session.status();
  return session->remote_info;
}

}  // namespace unloadkv::testing
