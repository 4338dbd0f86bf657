#include "transport/rpc/auth_file.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "transport/base/secret_file.h"

namespace unloadkv::rpc {
namespace {

constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 256;
constexpr size_t kMaxAuthFileBytes = 1 << 20;

absl::Status CheckSecret(absl::string_view secret) {
  if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the secret is ", secret.size(), " characters; it must be ", kMinSecretBytes,
                     "..", kMaxSecretBytes, " (generate one: openssl rand -hex 32)"));
  }
  for (char c : secret) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError("the secret has a character that is not printable");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckUserName(absl::string_view name) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("user name of ", name.size(), " characters: must be 1..64"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("user name \"", name, "\": only letters, digits, '_', '.' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> RolesNamed(absl::string_view name) {
  if (name == "client") return kRoleClient;
  if (name == "admin") return kRoleClient | kRoleAdmin;
  if (name == "node") return kRoleNode;
  return absl::InvalidArgumentError(
      absl::StrCat("role \"", name, "\": choose client, admin or node"));
}

std::string RoleNames(uint32_t roles) {
  std::vector<absl::string_view> names;
  if (roles & kRoleClient) names.push_back("client");
  if (roles & kRoleAdmin) names.push_back("admin");
  if (roles & kRoleNode) names.push_back("node");
  return names.empty() ? "none" : absl::StrJoin(names, "+");
}

absl::StatusOr<AuthTable> AuthTable::Parse(absl::string_view text, absl::string_view source) {
  AuthTable table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line_no, ": ", why));
    };
    if (fields.size() != 3) {
      return bad(absl::StrCat("expected \"NAME ROLE SECRET\", found ", fields.size(), " fields"));
    }
    if (absl::Status st = CheckUserName(fields[0]); !st.ok()) return bad(st.message());
    absl::StatusOr<uint32_t> roles = RolesNamed(fields[1]);
    if (!roles.ok()) return bad(roles.status().message());
    if (absl::Status st = CheckSecret(fields[2]); !st.ok()) return bad(st.message());
    AuthUser user{std::string(fields[0]), *roles, std::string(fields[2])};
    if (!table.users_.emplace(user.name, user).second) {
      return bad(absl::StrCat("user \"", user.name, "\" appears twice"));
    }
  }
  if (table.users_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " names no user"));
  }
  return table;
}

absl::StatusOr<AuthTable> AuthTable::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, kMaxAuthFileBytes);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

const AuthUser* AuthTable::Find(absl::string_view name) const {
  auto it = users_.find(name);
  return it == users_.end() ? nullptr : &it->second;
}

absl::StatusOr<Credentials> AuthTable::CredentialsOf(absl::string_view name) const {
  if (name.empty()) {
    if (users_.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("the auth file holds ", users_.size(),
                                                     " users; name the one to use (--user)"));
    }
    return Credentials{users_.begin()->second.name, users_.begin()->second.secret};
  }
  const AuthUser* u = Find(name);
  if (u == nullptr) {
    return absl::NotFoundError(absl::StrCat("the auth file has no user \"", name, "\""));
  }
  return Credentials{u->name, u->secret};
}

}  // namespace unloadkv::rpc
