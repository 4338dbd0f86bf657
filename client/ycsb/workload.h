// YCSB's core workload: configuration from properties (with YCSB's names and defaults), key
// naming, record contents, and the per-thread choice of the next operation.
#ifndef UNLOADKV_CLIENT_YCSB_WORKLOAD_H_
#define UNLOADKV_CLIENT_YCSB_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ycsb/db.h"
#include "client/ycsb/generators.h"
#include "client/ycsb/properties.h"

namespace unloadkv::ycsb {

enum class Op { kRead, kUpdate, kInsert, kScan, kReadModifyWrite };
const char* OpName(Op op);  // "READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"

struct WorkloadConfig {
  std::string table = "usertable";
  int64_t record_count = 1000;
  int64_t operation_count = 1000;
  int64_t insert_start = 0;
  int64_t insert_count = 0;  // load phase: records this process inserts (default record_count)
  int field_count = 10;
  int field_length = 100;
  std::string field_name_prefix = "field";
  bool read_all_fields = true;
  bool write_all_fields = false;
  double read = 0.95, update = 0.05, insert = 0, scan = 0, read_modify_write = 0;
  std::string request_distribution = "uniform";  // uniform | zipfian | latest | hotspot
  double zipfian_constant = kZipfianConstant;
  int max_scan_length = 1000;
  std::string scan_length_distribution = "uniform";  // uniform | zipfian
  bool ordered_inserts = false;                      // insertorder=ordered; default hashed
  int zero_padding = 1;
  double hotspot_data_fraction = 0.2;
  double hotspot_op_fraction = 0.8;
};

// Reads YCSB core-workload properties; every bad value is an error naming it.
absl::StatusOr<WorkloadConfig> ReadWorkloadConfig(const Properties& p);

// Shared by the client threads of one run.
class Workload {
 public:
  explicit Workload(WorkloadConfig config);
  const WorkloadConfig& config() const { return config_; }
  std::string KeyName(uint64_t key_number) const;
  std::string FieldName(int i) const;
  AcknowledgedCounter& insert_sequence() { return insert_sequence_; }

  // Per-thread state: generators are not shared.
  class Thread {
   public:
    Thread(Workload* w, uint64_t seed);
    Op NextOp();
    uint64_t NextKeyNumber();  // an existing record, by requestdistribution
    int NextScanLength();
    Record BuildRecord();                   // all fields
    Record BuildUpdate();                   // writeallfields ? all fields : one random field
    std::vector<std::string> ReadFields();  // empty = all
    Rng& rng() { return rng_; }

   private:
    std::string RandomValue();
    Workload* w_;
    Rng rng_;
    Discrete ops_;
    std::unique_ptr<Zipfian> zipf_;
    std::unique_ptr<ScrambledZipfian> scrambled_;
    std::unique_ptr<SkewedLatest> latest_;
    std::unique_ptr<Hotspot> hotspot_;
    std::unique_ptr<Zipfian> scan_zipf_;
  };

 private:
  WorkloadConfig config_;
  AcknowledgedCounter insert_sequence_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_WORKLOAD_H_
