#include "proto/field_record.h"

#include <cstdint>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace unloadkv::proto {
namespace {

void AppendLength(size_t n, std::string* out) {
  const uint32_t v = static_cast<uint32_t>(n);
  const char bytes[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
                         static_cast<char>((v >> 16) & 0xff), static_cast<char>(v >> 24)};
  out->append(bytes, 4);
}

uint32_t LoadLength(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

}  // namespace

void AppendField(absl::string_view name, absl::string_view value, std::string* out) {
  AppendLength(name.size(), out);
  out->append(name.data(), name.size());
  AppendLength(value.size(), out);
  out->append(value.data(), value.size());
}

absl::StatusOr<FieldViews> DecodeFieldRecord(absl::string_view bytes) {
  FieldViews fields;
  size_t at = 0;
  auto next = [&](absl::string_view* s) {
    if (bytes.size() - at < 4) return false;
    const uint32_t len = LoadLength(bytes.data() + at);
    at += 4;
    if (bytes.size() - at < len) return false;
    *s = bytes.substr(at, len);
    at += len;
    return true;
  };
  while (at < bytes.size()) {
    absl::string_view name, value;
    if (!next(&name) || !next(&value)) {
      return absl::DataLossError(
          absl::StrCat("field record: truncated at byte ", at, " of ", bytes.size()));
    }
    fields.emplace_back(name, value);
  }
  if (fields.size() <= 16) {  // YCSB's ten: comparing pairs beats hashing
    for (size_t i = 1; i < fields.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (fields[i].first == fields[j].first) {
          return absl::DataLossError(
              absl::StrCat("field record: field '", fields[i].first, "' twice"));
        }
      }
    }
  } else {
    absl::flat_hash_set<absl::string_view> names;
    names.reserve(fields.size());
    for (const auto& f : fields) {
      if (!names.insert(f.first).second) {
        return absl::DataLossError(absl::StrCat("field record: field '", f.first, "' twice"));
      }
    }
  }
  return fields;
}

absl::StatusOr<std::string> MergeFieldRecords(absl::string_view base, absl::string_view patch) {
  absl::StatusOr<FieldViews> b = DecodeFieldRecord(base);
  if (!b.ok()) return absl::DataLossError(absl::StrCat("stored value: ", b.status().message()));
  absl::StatusOr<FieldViews> p = DecodeFieldRecord(patch);
  if (!p.ok()) return absl::DataLossError(absl::StrCat("update: ", p.status().message()));
  absl::flat_hash_map<absl::string_view, absl::string_view> replace(p->begin(), p->end());
  std::string out;
  out.reserve(base.size() + patch.size());
  for (const auto& [name, value] : *b) {
    auto it = replace.find(name);
    if (it == replace.end()) {
      AppendField(name, value, &out);
    } else {
      AppendField(name, it->second, &out);
      replace.erase(it);
    }
  }
  for (const auto& [name, value] : *p) {  // new fields, in the patch's order
    if (replace.contains(name)) AppendField(name, value, &out);
  }
  return out;
}

}  // namespace unloadkv::proto
