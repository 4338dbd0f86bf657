#include "client/ycsb/workload.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::ycsb {

const char* OpName(Op op) {
  switch (op) {
    case Op::kRead:
      return "READ";
    case Op::kUpdate:
      return "UPDATE";
    case Op::kInsert:
      return "INSERT";
    case Op::kScan:
      return "SCAN";
    case Op::kReadModifyWrite:
      return "READ-MODIFY-WRITE";
  }
  return "?";
}

absl::StatusOr<WorkloadConfig> ReadWorkloadConfig(const Properties& p) {
  WorkloadConfig c;
  const std::string workload = p.GetString("workload", "site.ycsb.workloads.CoreWorkload");
  if (workload != "site.ycsb.workloads.CoreWorkload" &&
      workload != "com.yahoo.ycsb.workloads.CoreWorkload") {
    return absl::InvalidArgumentError(
        absl::StrCat("workload=", workload, ": only the core workload is implemented"));
  }
#define UKV_ASSIGN(lhs, expr)         \
  {                                   \
    auto v_ = (expr);                 \
    if (!v_.ok()) return v_.status(); \
    lhs = *v_;                        \
  }
  constexpr int64_t kBig = int64_t{1} << 40;
  c.table = p.GetString("table", c.table);
  UKV_ASSIGN(c.record_count, p.GetInt("recordcount", c.record_count, 1, kBig));
  UKV_ASSIGN(c.operation_count, p.GetInt("operationcount", c.operation_count, 0, kBig));
  UKV_ASSIGN(c.insert_start, p.GetInt("insertstart", 0, 0, kBig));
  UKV_ASSIGN(c.insert_count, p.GetInt("insertcount", c.record_count - c.insert_start, 0, kBig));
  int64_t v;
  UKV_ASSIGN(v, p.GetInt("fieldcount", c.field_count, 1, 1000));
  c.field_count = static_cast<int>(v);
  UKV_ASSIGN(v, p.GetInt("fieldlength", c.field_length, 0, 65000));
  c.field_length = static_cast<int>(v);
  const std::string fld = p.GetString("fieldlengthdistribution", "constant");
  if (fld != "constant") {
    return absl::InvalidArgumentError(
        absl::StrCat("fieldlengthdistribution=", fld, ": only constant is implemented"));
  }
  c.field_name_prefix = p.GetString("fieldnameprefix", c.field_name_prefix);
  UKV_ASSIGN(c.read_all_fields, p.GetBool("readallfields", true));
  UKV_ASSIGN(c.write_all_fields, p.GetBool("writeallfields", false));
  UKV_ASSIGN(c.read, p.GetDouble("readproportion", 0.95, 0, 1));
  UKV_ASSIGN(c.update, p.GetDouble("updateproportion", 0.05, 0, 1));
  UKV_ASSIGN(c.insert, p.GetDouble("insertproportion", 0, 0, 1));
  UKV_ASSIGN(c.scan, p.GetDouble("scanproportion", 0, 0, 1));
  UKV_ASSIGN(c.read_modify_write, p.GetDouble("readmodifywriteproportion", 0, 0, 1));
  if (c.read + c.update + c.insert + c.scan + c.read_modify_write <= 0) {
    return absl::InvalidArgumentError("the operation proportions are all zero");
  }
  c.request_distribution = p.GetString("requestdistribution", "uniform");
  if (c.request_distribution != "uniform" && c.request_distribution != "zipfian" &&
      c.request_distribution != "latest" && c.request_distribution != "hotspot") {
    return absl::InvalidArgumentError(absl::StrCat("requestdistribution=", c.request_distribution,
                                                   ": choose uniform, zipfian, latest, hotspot"));
  }
  UKV_ASSIGN(c.zipfian_constant, p.GetDouble("zipfian.constant", kZipfianConstant, 0.01, 0.9999));
  UKV_ASSIGN(v, p.GetInt("maxscanlength", c.max_scan_length, 1, 100000));
  c.max_scan_length = static_cast<int>(v);
  c.scan_length_distribution = p.GetString("scanlengthdistribution", "uniform");
  if (c.scan_length_distribution != "uniform" && c.scan_length_distribution != "zipfian") {
    return absl::InvalidArgumentError(absl::StrCat(
        "scanlengthdistribution=", c.scan_length_distribution, ": choose uniform or zipfian"));
  }
  const std::string order = p.GetString("insertorder", "hashed");
  if (order != "hashed" && order != "ordered") {
    return absl::InvalidArgumentError(
        absl::StrCat("insertorder=", order, ": choose hashed or ordered"));
  }
  c.ordered_inserts = order == "ordered";
  UKV_ASSIGN(v, p.GetInt("zeropadding", 1, 1, 32));
  c.zero_padding = static_cast<int>(v);
  UKV_ASSIGN(c.hotspot_data_fraction, p.GetDouble("hotspotdatafraction", 0.2, 0, 1));
  UKV_ASSIGN(c.hotspot_op_fraction, p.GetDouble("hotspotopnfraction", 0.8, 0, 1));
#undef UKV_ASSIGN
  return c;
}

Workload::Workload(WorkloadConfig config)
    : config_(std::move(config)), insert_sequence_(config_.record_count) {}

std::string Workload::KeyName(uint64_t n) const {
  const uint64_t v = config_.ordered_inserts ? n : FnvHash64(n);
  std::string digits = absl::StrCat(v);
  if (static_cast<int>(digits.size()) < config_.zero_padding) {
    digits.insert(0, config_.zero_padding - digits.size(), '0');
  }
  return absl::StrCat("user", digits);
}

std::string Workload::FieldName(int i) const { return absl::StrCat(config_.field_name_prefix, i); }

Workload::Thread::Thread(Workload* w, uint64_t seed) : w_(w), rng_(seed) {
  const WorkloadConfig& c = w->config_;
  ops_.Add(c.read, static_cast<int>(Op::kRead));
  ops_.Add(c.update, static_cast<int>(Op::kUpdate));
  ops_.Add(c.insert, static_cast<int>(Op::kInsert));
  ops_.Add(c.scan, static_cast<int>(Op::kScan));
  ops_.Add(c.read_modify_write, static_cast<int>(Op::kReadModifyWrite));
  const uint64_t n = static_cast<uint64_t>(c.record_count);
  if (c.request_distribution == "zipfian") {
    // YCSB sizes the zipfian for the records expected after this run's inserts.
    const uint64_t expected = n + static_cast<uint64_t>(c.operation_count * c.insert * 2.0);
    scrambled_ = std::make_unique<ScrambledZipfian>(0, expected - 1, c.zipfian_constant);
  } else if (c.request_distribution == "latest") {
    latest_ = std::make_unique<SkewedLatest>(&w->insert_sequence_);
  } else if (c.request_distribution == "hotspot") {
    hotspot_ = std::make_unique<Hotspot>(0, n - 1, c.hotspot_data_fraction, c.hotspot_op_fraction);
  }
  if (c.scan_length_distribution == "zipfian") {
    scan_zipf_ = std::make_unique<Zipfian>(1, c.max_scan_length);
  }
}

Op Workload::Thread::NextOp() { return static_cast<Op>(ops_.Next(rng_)); }

uint64_t Workload::Thread::NextKeyNumber() {
  const uint64_t limit = std::max<uint64_t>(1, w_->insert_sequence_.Limit());
  uint64_t k;
  do {
    if (scrambled_) {
      k = scrambled_->Next(rng_);
    } else if (latest_) {
      k = latest_->Next(rng_);
    } else if (hotspot_) {
      k = hotspot_->Next(rng_);
    } else {
      k = rng_() % limit;
    }
  } while (k >= limit);  // never a record whose insert has not completed
  return k;
}

int Workload::Thread::NextScanLength() {
  if (scan_zipf_) return static_cast<int>(scan_zipf_->Next(rng_));
  return 1 + static_cast<int>(rng_() % w_->config_.max_scan_length);
}

std::string Workload::Thread::RandomValue() {
  std::string s(w_->config_.field_length, ' ');
  for (char& ch : s) ch = static_cast<char>(' ' + rng_() % 95);
  return s;
}

Record Workload::Thread::BuildRecord() {
  Record r;
  for (int i = 0; i < w_->config_.field_count; ++i) r.emplace_back(w_->FieldName(i), RandomValue());
  return r;
}

Record Workload::Thread::BuildUpdate() {
  if (w_->config_.write_all_fields) return BuildRecord();
  return {{w_->FieldName(static_cast<int>(rng_() % w_->config_.field_count)), RandomValue()}};
}

std::vector<std::string> Workload::Thread::ReadFields() {
  if (w_->config_.read_all_fields) return {};
  return {w_->FieldName(static_cast<int>(rng_() % w_->config_.field_count))};
}

}  // namespace unloadkv::ycsb
