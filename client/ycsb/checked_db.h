// CheckedDb: a Db decorator that checks what reads return against what was written. Every
// value written (insert, update) is remembered as a 64-bit hash under its record and field;
// a read must return, for every field it asked for, a value that was written to that field of
// that record, and all the fields the record has; a record written must be found. Scanned values
// (scans return records without their keys) must be values written to some field of some record.
//
// One ValueLog is shared by the Dbs of all client threads of a run (and across its load and
// run phases). Thread-safe.
#ifndef UNLOADKV_CLIENT_YCSB_CHECKED_DB_H_
#define UNLOADKV_CLIENT_YCSB_CHECKED_DB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "client/ycsb/db.h"
#include "transport/base/mutex.h"

namespace unloadkv::ycsb {

class ValueLog {
 public:
  explicit ValueLog(int field_count) : field_count_(field_count) {}

  void Written(const std::string& key, const Record& values);
  // Checks a read of `fields` (empty: all) of `key` that returned `got`; false (and counted)
  // when a value was never written there or a field is missing.
  bool CheckRead(const std::string& key, const std::vector<std::string>& fields, const Record& got);
  bool CheckScan(const std::vector<Record>& got);
  // A read of `key` found no record although it was written (and never deleted: YCSB's core
  // workload deletes nothing): counted as a bad read.
  void NotFound(const std::string& key);

  struct Counts {
    uint64_t reads = 0, bad_reads = 0;
    uint64_t scanned_values = 0, bad_scanned_values = 0;
    std::string first_problem;  // what the first bad read or scan returned
  };
  Counts counts() const;

 private:
  static uint64_t Hash(const std::string& value);
  void Problem(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int field_count_;
  mutable Mutex mu_;
  // "<key>/<field>" -> hashes of the values written to it.
  absl::flat_hash_map<std::string, absl::InlinedVector<uint64_t, 2>> written_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> any_ ABSL_GUARDED_BY(mu_);  // every hash written
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

class CheckedDb : public Db {
 public:
  // `log` must outlive the Db.
  CheckedDb(std::unique_ptr<Db> inner, ValueLog* log) : inner_(std::move(inner)), log_(log) {}
  Db& inner() { return *inner_; }

  absl::Status Read(const std::string& key, const std::vector<std::string>& fields,
                    Record* out) override;
  absl::Status Scan(const std::string& start_key, int count, const std::vector<std::string>& fields,
                    std::vector<Record>* out) override;
  absl::Status Update(const std::string& key, const Record& values) override;
  absl::Status Insert(const std::string& key, const Record& values) override;
  absl::Status Delete(const std::string& key) override { return inner_->Delete(key); }

 private:
  std::unique_ptr<Db> inner_;
  ValueLog* log_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_CHECKED_DB_H_
