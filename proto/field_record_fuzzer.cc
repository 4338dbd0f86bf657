// libFuzzer target for the field record decoder and merge: arbitrary bytes as a stored value
// and as an update. A decoded record re-encodes to the same bytes; a merge of two records
// decodes, and holds every field of the update.
#include <cstdint>
#include <string>
#include <vector>

#include "proto/field_record.h"

using unloadkv::proto::AppendField;
using unloadkv::proto::DecodeFieldRecord;
using unloadkv::proto::MergeFieldRecords;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<unloadkv::proto::FieldViews> f = DecodeFieldRecord(bytes);
  if (f.ok()) {
    std::string again;
    for (const auto& [n, v] : *f) AppendField(n, v, &again);
    if (again != bytes) __builtin_trap();
  }
  const size_t half = size / 2;
  const std::string base = bytes.substr(0, half), patch = bytes.substr(half);
  absl::StatusOr<std::string> m = MergeFieldRecords(base, patch);
  if (m.ok()) {
    absl::StatusOr<unloadkv::proto::FieldViews> merged = DecodeFieldRecord(*m);
    absl::StatusOr<unloadkv::proto::FieldViews> p = DecodeFieldRecord(patch);
    if (!merged.ok() || !p.ok()) __builtin_trap();
    for (const auto& field : *p) {
      bool found = false;
      for (const auto& g : *merged) found = found || g == field;
      if (!found) __builtin_trap();
    }
  }
  return 0;
}

extern "C" void FuzzSeeds(std::vector<std::string>* seeds) {
  std::string a, b;
  AppendField("field0", "value0", &a);
  AppendField("field1", "value1", &a);
  AppendField("field1", "new", &b);
  seeds->push_back(a + b);
  seeds->push_back(a);
  seeds->push_back("");
}
