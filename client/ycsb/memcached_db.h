// YCSB records on memcached through libmemcached, as YCSB's memcached binding stores them: one
// value per record holding all its fields (here a length-prefixed encoding instead of YCSB's
// JSON), read whole and filtered; an update replaces the value with the fields it names (YCSB's
// binding does exactly that: memcached has no partial update); no scans (NOT_IMPLEMENTED in
// YCSB's binding: workload E does not run on memcached).
#ifndef UNLOADKV_CLIENT_YCSB_MEMCACHED_DB_H_
#define UNLOADKV_CLIENT_YCSB_MEMCACHED_DB_H_

#include <memory>
#include <string>

#include "client/ycsb/db.h"

struct memcached_st;

namespace unloadkv::ycsb {

class MemcachedDb : public Db {
 public:
  // `address` is host:port.
  static absl::StatusOr<std::unique_ptr<Db>> Connect(const std::string& address);
  ~MemcachedDb() override;
  absl::Status Read(const std::string& key, const std::vector<std::string>& fields,
                    Record* out) override;
  absl::Status Scan(const std::string& start_key, int count, const std::vector<std::string>& fields,
                    std::vector<Record>* out) override;
  absl::Status Update(const std::string& key, const Record& values) override;
  absl::Status Insert(const std::string& key, const Record& values) override;
  absl::Status Delete(const std::string& key) override;

  // A record as one value: a field record (proto/field_record.h), as the unloadkv binding
  // stores it. Decode refuses a truncated or overlong encoding, or a field named twice.
  static std::string Encode(const Record& r);
  static absl::StatusOr<Record> Decode(const std::string& bytes);

 private:
  explicit MemcachedDb(memcached_st* mc) : mc_(mc) {}
  memcached_st* mc_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_MEMCACHED_DB_H_
