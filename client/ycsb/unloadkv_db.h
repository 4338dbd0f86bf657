// YCSB records on unloadkv: one key per field, "<record key>/<field name>", so a read of all
// fields is one Scan of the record's prefix, an update of one field is one Put (its value goes
// through the offload/unload write engine), and an insert is one Put per field, issued together.
#ifndef UNLOADKV_CLIENT_YCSB_UNLOADKV_DB_H_
#define UNLOADKV_CLIENT_YCSB_UNLOADKV_DB_H_

#include <memory>

#include "client/client.h"
#include "client/ycsb/db.h"

namespace unloadkv::ycsb {

class UnloadkvDb : public Db {
 public:
  static absl::StatusOr<std::unique_ptr<Db>> Connect(const ClientOptions& options);
  // A Db on a client connected already (the simulated fabric's).
  static std::unique_ptr<Db> Wrap(std::unique_ptr<Client> client) {
    return std::unique_ptr<Db>(new UnloadkvDb(std::move(client)));
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
  explicit UnloadkvDb(std::unique_ptr<Client> c) : client_(std::move(c)) {}
  absl::Status PutAll(const std::string& key, const Record& values);
  std::unique_ptr<Client> client_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_UNLOADKV_DB_H_
