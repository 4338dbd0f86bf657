// YCSB's property files (Java .properties syntax: `key=value` or `key: value`, `#` and `!`
// comments, a trailing backslash continues a line) and `-p key=value` overrides.
#ifndef UNLOADKV_CLIENT_YCSB_PROPERTIES_H_
#define UNLOADKV_CLIENT_YCSB_PROPERTIES_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::ycsb {

class Properties {
 public:
  // Parses `text`; `source` names it in errors ("workloads/workloada:12: ...").
  absl::Status ParseText(absl::string_view text, const std::string& source);
  absl::Status LoadFile(const std::string& path);
  // "key=value" from the command line; later settings override earlier ones.
  absl::Status SetFromArg(absl::string_view kv);
  void Set(const std::string& key, const std::string& value, const std::string& source);

  bool Has(const std::string& key) const { return values_.count(key) > 0; }
  std::string GetString(const std::string& key, const std::string& def) const;
  // Typed getters: InvalidArgument naming the key, its value and where it was set.
  absl::StatusOr<int64_t> GetInt(const std::string& key, int64_t def, int64_t min,
                                 int64_t max) const;
  absl::StatusOr<double> GetDouble(const std::string& key, double def, double min,
                                   double max) const;
  absl::StatusOr<bool> GetBool(const std::string& key, bool def) const;

 private:
  struct Value {
    std::string text;
    std::string source;
  };
  absl::Status Bad(const std::string& key, absl::string_view why) const;
  std::map<std::string, Value> values_;
};

}  // namespace unloadkv::ycsb

#endif  // UNLOADKV_CLIENT_YCSB_PROPERTIES_H_
