#include "client/ycsb/unloadkv_db.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "proto/field_record.h"

namespace unloadkv::ycsb {
namespace {

// Record keys never contain '/', so "<key>/" .. "<key>0" bounds exactly one record's fields.
std::string FieldKey(const std::string& key, const std::string& field) {
  return absl::StrCat(key, "/", field);
}

bool Wanted(const std::vector<std::string>& fields, absl::string_view f) {
  return fields.empty() || std::find(fields.begin(), fields.end(), f) != fields.end();
}

std::string Encode(const Record& values) {
  std::string out;
  for (const auto& [name, value] : values) proto::AppendField(name, value, &out);
  return out;
}

// The fields of a stored record that `fields` asks for (all when empty).
absl::Status DecodeWanted(absl::string_view bytes, const std::vector<std::string>& fields,
                          Record* out) {
  absl::StatusOr<proto::FieldViews> f = proto::DecodeFieldRecord(bytes);
  if (!f.ok()) return f.status();
  for (const auto& [name, value] : *f) {
    if (Wanted(fields, name)) out->emplace_back(std::string(name), std::string(value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UnloadkvDb::Layout> UnloadkvDb::ParseLayout(const std::string& name) {
  if (name == "record") return Layout::kRecord;
  if (name == "field_per_key") return Layout::kFieldPerKey;
  return absl::InvalidArgumentError(
      absl::StrCat("unloadkv.layout '", name, "': use record or field_per_key"));
}

absl::StatusOr<std::unique_ptr<Db>> UnloadkvDb::Connect(const ClientOptions& options,
                                                        Layout layout) {
  auto c = Client::Connect(options);
  if (!c.ok()) return c.status();
  return Wrap(std::move(*c), layout);
}

absl::Status UnloadkvDb::Read(const std::string& key, const std::vector<std::string>& fields,
                              Record* out) {
  if (layout_ == Layout::kFieldPerKey) return ReadFields(key, fields, out);
  out->clear();
  absl::StatusOr<std::string> v = client_->Get(key);
  if (!v.ok()) return v.status();
  return DecodeWanted(*v, fields, out);
}

absl::Status UnloadkvDb::Scan(const std::string& start_key, int count,
                              const std::vector<std::string>& fields, std::vector<Record>* out) {
  if (layout_ == Layout::kFieldPerKey) return ScanFields(start_key, count, fields, out);
  out->clear();
  std::string start = start_key;
  while (static_cast<int>(out->size()) < count) {
    const int left = count - static_cast<int>(out->size());
    absl::StatusOr<ScanPage> page =
        client_->Scan(start, "", static_cast<uint32_t>(std::min(left, 1000)));  // the page limit
    if (!page.ok()) return page.status();
    for (auto& [k, v] : page->items) {
      if (k.find('/') != std::string::npos) continue;  // not a record key
      if (absl::Status st = DecodeWanted(v, fields, &out->emplace_back()); !st.ok()) return st;
    }
    if (!page->more || page->items.empty()) break;
    start = page->items.back().first + std::string(1, '\0');
  }
  return absl::OkStatus();
}

absl::Status UnloadkvDb::ReadFields(const std::string& key, const std::vector<std::string>& fields,
                                    Record* out) {
  out->clear();
  if (fields.size() == 1) {
    absl::StatusOr<std::string> v = client_->Get(FieldKey(key, fields[0]));
    if (!v.ok()) return v.status();
    out->emplace_back(fields[0], std::move(*v));
    return absl::OkStatus();
  }
  std::string start = absl::StrCat(key, "/"), end = absl::StrCat(key, "0");
  while (true) {
    absl::StatusOr<ScanPage> page = client_->Scan(start, end, 1000);
    if (!page.ok()) return page.status();
    for (auto& [k, v] : page->items) {
      std::string field = k.substr(key.size() + 1);
      if (Wanted(fields, field)) out->emplace_back(std::move(field), std::move(v));
    }
    if (!page->more || page->items.empty()) break;
    start = page->items.back().first + std::string(1, '\0');
  }
  if (out->empty()) return absl::NotFoundError(absl::StrCat("record ", key));
  return absl::OkStatus();
}

absl::Status UnloadkvDb::ScanFields(const std::string& start_key, int count,
                                    const std::vector<std::string>& fields,
                                    std::vector<Record>* out) {
  out->clear();
  std::string start = start_key, current;
  while (static_cast<int>(out->size()) <= count) {
    absl::StatusOr<ScanPage> page = client_->Scan(start, "", 1000);
    if (!page.ok()) return page.status();
    for (auto& [k, v] : page->items) {
      size_t slash = k.find('/');
      if (slash == std::string::npos) continue;
      std::string record = k.substr(0, slash);
      if (record != current) {
        if (static_cast<int>(out->size()) == count) return absl::OkStatus();
        out->emplace_back();
        current = record;
      }
      std::string field = k.substr(slash + 1);
      if (Wanted(fields, field)) out->back().emplace_back(std::move(field), std::move(v));
    }
    if (!page->more || page->items.empty()) break;
    start = page->items.back().first + std::string(1, '\0');
  }
  return absl::OkStatus();
}

absl::Status UnloadkvDb::PutAll(const std::string& key, const Record& values) {
  if (values.size() == 1) return client_->Put(FieldKey(key, values[0].first), values[0].second);
  // All fields in flight together; wait for the last answer.
  std::mutex mu;
  std::atomic<size_t> left{values.size()};
  absl::Status first_error;
  for (const auto& [field, value] : values) {
    client_->PutAsync(FieldKey(key, field), value, [&](absl::StatusOr<uint64_t> r) {
      std::lock_guard<std::mutex> l(mu);
      if (!r.ok() && first_error.ok()) first_error = std::move(r).status();
      left.fetch_sub(1, std::memory_order_release);
    });
  }
  client_->Wait([&] { return left.load(std::memory_order_acquire) == 0; });
  std::lock_guard<std::mutex> l(mu);  // the last callback has left its critical section
  return first_error;
}

absl::Status UnloadkvDb::Update(const std::string& key, const Record& values) {
  if (layout_ == Layout::kFieldPerKey) return PutAll(key, values);
  return client_->MergeFields(key, Encode(values));
}

absl::Status UnloadkvDb::Insert(const std::string& key, const Record& values) {
  if (layout_ == Layout::kFieldPerKey) return PutAll(key, values);
  return client_->Put(key, Encode(values));
}

absl::Status UnloadkvDb::Delete(const std::string& key) {
  if (layout_ == Layout::kRecord) return client_->Delete(key);
  Record fields;
  if (absl::Status st = Read(key, {}, &fields); !st.ok()) return st;
  for (const auto& [field, value] : fields) {
    if (absl::Status st = client_->Delete(FieldKey(key, field)); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace unloadkv::ycsb
