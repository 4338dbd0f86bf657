#include "client/value_policy.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "proto/limits.h"

namespace unloadkv::client_internal {

absl::StatusOr<ValuePolicy> ParseValuePolicy(absl::string_view policy) {
  ValuePolicy out;
  const size_t comma = policy.find(',');
  out.engine_policy = std::string(policy.substr(0, comma));
  if (comma == absl::string_view::npos) return out;
  absl::string_view rest = policy.substr(comma + 1);
  uint32_t n = 0;
  if (!absl::ConsumePrefix(&rest, "inline:") || !absl::SimpleAtoi(rest, &n) ||
      n > proto::kMaxInlineValueBytes || rest.empty() || rest[0] == '+' || rest[0] == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat("policy \"", policy, "\": expected POLICY or POLICY,inline:N with N in 0..",
                     proto::kMaxInlineValueBytes, " (the largest value a PUT carries inline)"));
  }
  out.inline_bytes = n;
  out.inline_said = true;
  return out;
}

uint32_t InlineBytesOn(const ValuePolicy& policy, absl::string_view transport) {
  if (policy.inline_said) return policy.inline_bytes;
  return policy.engine_policy == "adaptive" && transport == "soft" ? proto::kMaxInlineValueBytes
                                                                   : 0;
}

}  // namespace unloadkv::client_internal
