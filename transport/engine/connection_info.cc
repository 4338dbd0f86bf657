// ConnectionInfo as one line of text: what a peer needs to connect (fuzzed).
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "transport/engine/engine.h"
#include "transport/engine/engine_wire.h"

namespace unloadkv::engine {

std::string EncodeConnectionInfo(const ConnectionInfo& i) {
  std::string staging;
  for (const ConnectionInfo::StagingQp& q : i.staging) {
    absl::StrAppend(&staging, staging.empty() ? "" : ",", q.qp_num, ":", q.psn);
  }
  return absl::StrCat(
      rnic::EncodeQpAttributes(i.qp), " staging=", staging, " staging_slots=", i.staging_slots,
      " staging_credits=", i.staging_credits, " slot_bytes=", i.slot_bytes,
      " message_slots=", i.message_slots, " message_credits=", i.message_credits,
      " max_message_bytes=", i.max_message_bytes,
      i.translation_cache == rnic::TranslationCacheState::kFull      ? " translation_cache=full"
      : i.translation_cache == rnic::TranslationCacheState::kWarming ? " translation_cache=warming"
                                                                     : "");
}

namespace {
// "qp_num:psn,qp_num:psn...", one to kMaxLanes entries.
bool ParseStaging(absl::string_view text, std::vector<ConnectionInfo::StagingQp>* out) {
  out->clear();
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> q =
        absl::StrSplit(item, absl::MaxSplits(':', 1));
    ConnectionInfo::StagingQp s;
    if (!absl::SimpleAtoi(q.first, &s.qp_num) || !absl::SimpleAtoi(q.second, &s.psn)) return false;
    out->push_back(s);
  }
  return !out->empty() && out->size() <= kMaxLanes;
}
}  // namespace

absl::StatusOr<ConnectionInfo> DecodeConnectionInfo(absl::string_view text) {
  if (text.size() > 2048) return absl::InvalidArgumentError("connection info: over 2 KiB");
  std::vector<std::string> qp_fields;
  ConnectionInfo info;
  bool cache_seen = false;
  struct Field {
    const char* name;
    uint64_t* wide;
    uint32_t* narrow;
    bool seen;
  } fields[] = {{"staging", nullptr, nullptr, false},
                {"staging_slots", nullptr, &info.staging_slots, false},
                {"staging_credits", nullptr, &info.staging_credits, false},
                {"slot_bytes", nullptr, &info.slot_bytes, false},
                {"message_slots", nullptr, &info.message_slots, false},
                {"message_credits", nullptr, &info.message_credits, false},
                {"max_message_bytes", nullptr, &info.max_message_bytes, false}};
  for (absl::string_view token : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(token, absl::MaxSplits('=', 1));
    if (kv.first == "transport" || kv.first == "address" || kv.first == "qp_num" ||
        kv.first == "psn") {
      qp_fields.emplace_back(token);
      continue;
    }
    if (kv.first == "translation_cache") {  // optional
      if (cache_seen || (kv.second != "full" && kv.second != "warming")) {
        return absl::InvalidArgumentError(
            "connection info: bad or repeated value for 'translation_cache' (full or warming)");
      }
      cache_seen = true;
      info.translation_cache = kv.second == "full" ? rnic::TranslationCacheState::kFull
                                                   : rnic::TranslationCacheState::kWarming;
      continue;
    }
    Field* f = nullptr;
    for (Field& candidate : fields) {
      if (kv.first == candidate.name) f = &candidate;
    }
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("connection info: unknown key '", kv.first, "'"));
    }
    bool ok = f->wide     ? absl::SimpleAtoi(kv.second, f->wide)
              : f->narrow ? absl::SimpleAtoi(kv.second, f->narrow)
                          : ParseStaging(kv.second, &info.staging);
    if (!ok || f->seen) {
      return absl::InvalidArgumentError(
          absl::StrCat("connection info: bad or repeated value for '", f->name, "'"));
    }
    f->seen = true;
  }
  for (const Field& f : fields) {
    if (!f.seen)
      return absl::InvalidArgumentError(absl::StrCat("connection info: missing '", f.name, "'"));
  }
  absl::StatusOr<rnic::QpAttributes> qp = rnic::DecodeQpAttributes(absl::StrJoin(qp_fields, " "));
  if (!qp.ok()) return qp.status();
  info.qp = *qp;
  return info;
}

}  // namespace unloadkv::engine
