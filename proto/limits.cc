#include "proto/limits.h"

#include "absl/strings/str_cat.h"

namespace unloadkv::proto {

absl::Status CheckKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes; keys are 1..", kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckValueSize(size_t size) {
  if (size > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of ", size, " bytes; values are at most ", kMaxValueBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace unloadkv::proto
