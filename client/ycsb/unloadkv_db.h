// YCSB records on unloadkv, in one of two layouts (docs/ycsb.md, "How records are stored"):
//  * kRecord (the default): a record is one value, a field record (proto/field_record.h). A
//    read is one Get, an insert one Put, an update one MergeFields (the server replaces the
//    named fields and keeps the others), a scan one Scan of record keys.
//  * kFieldPerKey: one key per field, "<record key>/<field name>"; a read of all fields is one
//    Scan of the record's prefix, an update of one field is one Put, an insert one Put per
//    field issued together. The simulated fabric's measurements (docs/sim-kv.md) used it.
// Every value goes through the offload/unload write engine either way.
#ifndef UNLOADKV_CLIENT_YCSB_UNLOADKV_DB_H_
#define UNLOADKV_CLIENT_YCSB_UNLOADKV_DB_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/ycsb/db.h"

namespace unloadkv::ycsb {

class UnloadkvDb : public Db {
 public:
  enum class Layout { kRecord, kFieldPerKey };
  // "record" or "field_per_key"; InvalidArgument otherwise.
  static absl::StatusOr<Layout> ParseLayout(const std::string& name);

  static absl::StatusOr<std::unique_ptr<Db>> Connect(const ClientOptions& options, Layout layout);
  // A Db on a client connected already (shared by several threads, or the simulated
  // fabric's).
  static std::unique_ptr<Db> Wrap(std::shared_ptr<Client> client, Layout layout) {
    return std::unique_ptr<Db>(new UnloadkvDb(std::move(client), layout));
  }
  absl::Status Read(const std::string& key, const std::vector<std::string>& fields,
                    Record* out) override;
  absl::Status Scan(const std::string& start_key, int count, const std::vector<std::string>& fields,
                    std::vector<Record>* out) override;
  absl::Status Update(const std::string& key, const Record& values) override;
  absl::Status Insert(const std::string& key, const Record& values) override;
  absl::Status Delete(const std::string& key) override;
  Client& client() { return *client_; }

 private:
  UnloadkvDb(std::shared_ptr<Client> c, Layout layout) : client_(std::move(c)), layout_(layout) {}
  absl::Status PutAll(const std::string& key, const Record& values);
  absl::Status ReadFields(const std::string& key, const std::vector<std::string>& fields,
                          Record* out);
  absl::Status ScanFields(const std::string& start_key, int count,
                          const std::vector<std::string>& fields, std::vector<Record>* out);
  std::shared_ptr<Client> client_;
  const Layout layout_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_UNLOADKV_DB_H_
