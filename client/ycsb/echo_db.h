// The loopback limit: a YCSB binding that stores nothing. Each operation is one request/response
// exchange over TCP with echo_server (client/ycsb/echo_server.cc), of the sizes a KV store would
// exchange for it: a read sends the key and field names and receives the record's bytes
// (field_count x (name + field_length)); an update or insert sends the key and values and
// receives a short status; a delete sends the key. No KV store over TCP with one request in
// flight per thread can beat it: it is the wire, the kernel and the two event loops, with no
// work. Scans are not modeled (workload E does not run on it).
//
// Frame: u32 request length, u32 reply length (little-endian), then the request bytes; the
// reply is that many bytes.
#ifndef UNLOADKV_CLIENT_YCSB_ECHO_DB_H_
#define UNLOADKV_CLIENT_YCSB_ECHO_DB_H_

#include <memory>
#include <string>

#include "client/ycsb/db.h"
#include "transport/base/net.h"

namespace unloadkv::ycsb {

class EchoDb : public Db {
 public:
  // `address` is host:port; `record_bytes` is what a read of a whole record returns.
  static absl::StatusOr<std::unique_ptr<Db>> Connect(const std::string& address,
                                                     uint32_t record_bytes);
  absl::Status Read(const std::string& key, const std::vector<std::string>& fields,
                    Record* out) override;
  absl::Status Scan(const std::string& start_key, int count, const std::vector<std::string>& fields,
                    std::vector<Record>* out) override;
  absl::Status Update(const std::string& key, const Record& values) override;
  absl::Status Insert(const std::string& key, const Record& values) override;
  absl::Status Delete(const std::string& key) override;

  static constexpr uint32_t kStatusBytes = 8;  // the reply to a write or delete

 private:
  EchoDb(ScopedFd fd, uint32_t record_bytes) : fd_(std::move(fd)), record_bytes_(record_bytes) {}
  // Sends `request_bytes` (the first bytes from `head`, then zeros) and waits for the reply.
  absl::Status Exchange(const std::string& head, size_t request_bytes, uint32_t reply_bytes);

  ScopedFd fd_;
  const uint32_t record_bytes_;
  std::string buffer_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_ECHO_DB_H_
