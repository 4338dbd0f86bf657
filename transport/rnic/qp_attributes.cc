#include "transport/rnic/qp_attributes.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace unloadkv::rnic {

std::string EncodeQpAttributes(const QpAttributes& a) {
  return absl::StrCat("transport=", a.transport, " address=", a.address, " qp_num=", a.qp_num,
                      " psn=", a.psn);
}

absl::StatusOr<QpAttributes> DecodeQpAttributes(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.size() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("QP attributes: text is ", text.size(), " bytes, limit 1024"));
  }
  QpAttributes out;
  bool seen[4] = {false, false, false, false};
  for (absl::string_view field : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("QP attributes: field '", field, "' is not key=value"));
    }
    absl::string_view key = kv[0], value = kv[1];
    int index;
    if (key == "transport") {
      index = 0;
      out.transport = std::string(value);
    } else if (key == "address") {
      index = 1;
      out.address = std::string(value);
    } else if (key == "qp_num" || key == "psn") {
      index = key == "qp_num" ? 2 : 3;
      uint32_t number;
      if (!absl::SimpleAtoi(value, &number)) {
        return absl::InvalidArgumentError(
            absl::StrCat("QP attributes: ", key, "='", value, "' is not a 32-bit number"));
      }
      (index == 2 ? out.qp_num : out.psn) = number;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("QP attributes: unknown key '", key, "'"));
    }
    if (seen[index]) {
      return absl::InvalidArgumentError(absl::StrCat("QP attributes: duplicate key '", key, "'"));
    }
    seen[index] = true;
  }
  static constexpr const char* kNames[4] = {"transport", "address", "qp_num", "psn"};
  for (int i = 0; i < 4; ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(absl::StrCat("QP attributes: missing '", kNames[i], "'"));
    }
  }
  if (out.transport.empty() || out.address.empty()) {
    return absl::InvalidArgumentError("QP attributes: transport and address must be non-empty");
  }
  return out;
}

}  // namespace unloadkv::rnic
