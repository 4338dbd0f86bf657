#include "client/ycsb/checked_db.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace unloadkv::ycsb {

uint64_t ValueLog::Hash(const std::string& value) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the same on every run and host
  for (unsigned char c : value) h = (h ^ c) * 1099511628211ull;
  return h;
}

void ValueLog::Problem(const std::string& what) {
  if (counts_.first_problem.empty()) counts_.first_problem = what;
}

void ValueLog::Written(const std::string& key, const Record& values) {
  MutexLock l(&mu_);
  for (const auto& [field, value] : values) {
    const uint64_t h = Hash(value);
    written_[absl::StrCat(key, "/", field)].push_back(h);
    any_.insert(h);
  }
}

bool ValueLog::CheckRead(const std::string& key, const std::vector<std::string>& fields,
                         const Record& got) {
  MutexLock l(&mu_);
  ++counts_.reads;
  bool ok = got.size() == (fields.empty() ? static_cast<size_t>(field_count_) : fields.size());
  if (!ok) {
    Problem(absl::StrCat("read of ", key, " returned ", got.size(), " fields"));
  }
  for (const auto& [field, value] : got) {
    auto it = written_.find(absl::StrCat(key, "/", field));
    const uint64_t h = Hash(value);
    if (it == written_.end() ||
        std::find(it->second.begin(), it->second.end(), h) == it->second.end()) {
      ok = false;
      Problem(absl::StrCat("read of ", key, "/", field, " returned a value never written there (",
                           value.size(), " bytes)"));
    }
  }
  if (!ok) ++counts_.bad_reads;
  return ok;
}

void ValueLog::NotFound(const std::string& key) {
  MutexLock l(&mu_);
  ++counts_.reads;
  ++counts_.bad_reads;
  Problem(absl::StrCat("read of ", key, " found no record"));
}

bool ValueLog::CheckScan(const std::vector<Record>& got) {
  MutexLock l(&mu_);
  bool ok = true;
  for (const Record& r : got) {
    for (const auto& [field, value] : r) {
      ++counts_.scanned_values;
      if (any_.count(Hash(value)) == 0) {
        ++counts_.bad_scanned_values;
        ok = false;
        Problem(absl::StrCat("scan returned a ", value.size(), "-byte value never written"));
      }
    }
  }
  return ok;
}

ValueLog::Counts ValueLog::counts() const {
  MutexLock l(&mu_);
  return counts_;
}

absl::Status CheckedDb::Read(const std::string& key, const std::vector<std::string>& fields,
                             Record* out) {
  absl::Status st = inner_->Read(key, fields, out);
  if (st.ok()) log_->CheckRead(key, fields, *out);
  if (st.code() == absl::StatusCode::kNotFound) log_->NotFound(key);
  return st;
}

absl::Status CheckedDb::Scan(const std::string& start_key, int count,
                             const std::vector<std::string>& fields, std::vector<Record>* out) {
  absl::Status st = inner_->Scan(start_key, count, fields, out);
  if (st.ok()) log_->CheckScan(*out);
  return st;
}

// Logged before the write is issued: a read that overlaps the write may see the new value.
absl::Status CheckedDb::Update(const std::string& key, const Record& values) {
  log_->Written(key, values);
  return inner_->Update(key, values);
}

absl::Status CheckedDb::Insert(const std::string& key, const Record& values) {
  log_->Written(key, values);
  return inner_->Insert(key, values);
}

}  // namespace unloadkv::ycsb
