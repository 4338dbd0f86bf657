// A protocol-level kvserver connection for tests that must do what the SDK never does: forge
// grants, reuse them, send malformed frames, or die between a value write and its PUT.
#ifndef UNLOADKV_TESTS_KV_RAW_CONNECTION_H_
#define UNLOADKV_TESTS_KV_RAW_CONNECTION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "proto/kv.pb.h"
#include "transport/engine/engine.h"
#include "transport/rnic/device.h"
#include "transport/rpc/auth_file.h"
#include "transport/rpc/rpc.h"

namespace unloadkv::testing {

class RawConnection {
 public:
  // Connects to `server`, proving `credentials` (nullable: none); its writes take `path`.
  static absl::StatusOr<std::unique_ptr<RawConnection>> Open(
      const std::string& server, const rpc::Credentials* credentials = nullptr,
      engine::Path path = engine::Path::kOffload);
  ~RawConnection();

  absl::StatusOr<std::string> Call(uint16_t method, const std::string& payload);
  absl::StatusOr<std::string> Call(proto::Method method, const google::protobuf::Message& m) {
    return Call(static_cast<uint16_t>(method), m.SerializeAsString());
  }
  absl::StatusOr<proto::SlotGrant> Grant(uint32_t size, uint32_t shard = 0);
  // Writes `value` into the slot and waits until the write completed (it is in server memory).
  absl::Status WriteValue(const proto::SlotGrant& g, const std::string& value);
  // With `invalidate_rkey`, the PUT is sent as SEND_WITH_INVALIDATE of that key (as the SDK
  // ends a window grant's key). `shard`: the grant's shard (PutRequest.shard).
  absl::Status Put(const std::string& key, uint64_t grant_id, uint32_t size,
                   uint32_t invalidate_rkey = 0, uint32_t shard = 0);
  // Writes `bytes` to [addr, addr + size) under `rkey`, whatever was granted, and waits for
  // the outcome: what the engine reported (status, path), or DeadlineExceeded.
  absl::StatusOr<engine::WriteResult> WriteRaw(uint64_t addr, uint32_t rkey,
                                               const std::string& bytes);
  bool failed() const { return conn_->failed(); }
  // Sends raw bytes as a message (bypassing RPC framing).
  absl::Status SendRaw(const std::string& bytes);

 private:
  RawConnection() = default;
  std::unique_ptr<rnic::Device> device_;
  std::unique_ptr<engine::Engine> engine_;
  std::vector<char> buf_;
  std::unique_ptr<rnic::MemoryRegion> mr_;
  std::shared_ptr<engine::Connection> conn_;
  std::unique_ptr<rpc::RpcClient> rpc_;
};

// A peer that says a valid hello and then never completes the data path (it never dials the
// server's QPs and sends no message): what a server must reap. One engine holds every
// connection it opened until DropAll or destruction. Not thread-safe.
class HalfOpenPeer {
 public:
  static absl::StatusOr<std::unique_ptr<HalfOpenPeer>> Create();
  ~HalfOpenPeer();
  // Creates a connection and exchanges hellos with `server`; returns the server's answer (its
  // connection info) or its refusal. With `address`, the hello names that soft address
  // instead of this peer's own.
  absl::StatusOr<std::string> Hello(const std::string& server, const std::string& address = "");
  // A new connection's encoded info, naming `address` as its soft address: what a server
  // would answer, for tests that play the server.
  absl::StatusOr<std::string> Info(const std::string& address);
  size_t held() const { return conns_.size(); }
  // Destroys the connections (the server sees their streams close).
  void DropAll() { conns_.clear(); }

 private:
  HalfOpenPeer() = default;
  std::unique_ptr<rnic::Device> device_;
  std::unique_ptr<engine::Engine> engine_;
  std::vector<std::unique_ptr<engine::Connection>> conns_;
};

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_KV_RAW_CONNECTION_H_
