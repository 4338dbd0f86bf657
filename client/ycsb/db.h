// The store a YCSB workload runs against: YCSB's DB binding interface, one instance per client
// thread (not shared between threads).
#ifndef UNLOADKV_CLIENT_YCSB_DB_H_
#define UNLOADKV_CLIENT_YCSB_DB_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace unloadkv::ycsb {

using Record = std::vector<std::pair<std::string, std::string>>;  // field name -> value

class Db {
 public:
  virtual ~Db() = default;
  // `fields` empty means all fields. NotFound when the record does not exist.
  virtual absl::Status Read(const std::string& key, const std::vector<std::string>& fields,
                            Record* out) = 0;
  // Up to `count` records with keys >= start_key, in key order.
  virtual absl::Status Scan(const std::string& start_key, int count,
                            const std::vector<std::string>& fields, std::vector<Record>* out) = 0;
  // Sets the given fields of an existing record.
  virtual absl::Status Update(const std::string& key, const Record& values) = 0;
  virtual absl::Status Insert(const std::string& key, const Record& values) = 0;
  virtual absl::Status Delete(const std::string& key) = 0;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_DB_H_
