// A value made of named fields: what a YCSB record is, stored as one value (docs/ycsb.md).
// The server understands it only for PUT with merge_fields (docs/kv.md), which replaces the
// named fields of a stored record and keeps the others, in one round trip.
//
// Encoding: for each field in order, u32 name length, name bytes, u32 value length, value
// bytes (lengths little-endian). An empty string is a record with no fields. Field names are
// unique within a record; a decoder refuses duplicates, so every valid encoding has one meaning.
#ifndef UNLOADKV_PROTO_FIELD_RECORD_H_
#define UNLOADKV_PROTO_FIELD_RECORD_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::proto {

// Views into the encoded bytes; valid while those bytes are.
using FieldViews = std::vector<std::pair<absl::string_view, absl::string_view>>;

// Appends the encoding of (name, value) to `out`.
void AppendField(absl::string_view name, absl::string_view value, std::string* out);

// DataLoss naming what is wrong for bytes that are not a field record (a truncated length or
// field, a duplicate name).
absl::StatusOr<FieldViews> DecodeFieldRecord(absl::string_view bytes);

// `base` with every field of `patch` applied: a field of the same name takes the patch's value
// in place, a new one is appended. Both must decode (errors as DecodeFieldRecord's, naming
// which one failed).
absl::StatusOr<std::string> MergeFieldRecords(absl::string_view base, absl::string_view patch);

}  // namespace unloadkv::proto

#endif  // UNLOADKV_PROTO_FIELD_RECORD_H_
