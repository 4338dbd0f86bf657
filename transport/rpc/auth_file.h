// Who may connect, and as what: the users of an auth file, their roles and shared secrets.
//
// An auth file has one user per line, "NAME ROLE SECRET", fields separated by blanks; '#'
// starts a comment, blank lines are skipped:
//   # name   role    secret (at least 16 characters; generate with `openssl rand -hex 32`)
//   app      client  6f1d9c0b...
//   ops      admin   a41e77d2...
//   n1       node    0c9b3a54...
// NAME is 1..64 of [A-Za-z0-9_.-]; ROLE is client, admin or node; SECRET is 16..256 printable
// characters without blanks. A name appears once. The file must not be readable by others
// (mode o-rwx), as ssh demands of private keys: a secret in a world-readable file is no secret.
//
// Roles (docs/security.md): `client` may read and write keys; `admin` may do what a client
// may and administer the cluster; `node` is a cluster node and may replicate. A server reads
// the whole file; a client or a node proves one entry of it (Credentials).
//
// Thread-compatible values: an AuthTable is immutable once parsed (a reload builds a new one).
#ifndef UNLOADKV_TRANSPORT_RPC_AUTH_FILE_H_
#define UNLOADKV_TRANSPORT_RPC_AUTH_FILE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace unloadkv::rpc {

// Role bits a connection holds (rpc::Peer::roles).
enum Role : uint32_t {
  kRoleClient = 1,  // GET, PUT, DELETE, SCAN, MERGE
  kRoleAdmin = 2,   // cluster administration
  kRoleNode = 4,    // node-to-node methods (replication)
};
inline constexpr uint32_t kAllRoles = kRoleClient | kRoleAdmin | kRoleNode;

// The role bits a user of role `name` holds ("admin" holds client's too); InvalidArgument for
// an unknown name.
absl::StatusOr<uint32_t> RolesNamed(absl::string_view name);
// "client", "admin", "node", joined by '+' for several ("client+admin"); "none" for 0.
std::string RoleNames(uint32_t roles);

struct AuthUser {
  std::string name;
  uint32_t roles = 0;
  std::string secret;
};

// What a client (or node) proves: one user of an auth file.
struct Credentials {
  std::string user;
  std::string secret;
};

class AuthTable {
 public:
  // Parses auth-file text; `source` names it in errors ("auth.txt line 3: ..."). Errors are
  // InvalidArgument naming the line and the field, never quoting a secret.
  static absl::StatusOr<AuthTable> Parse(absl::string_view text, absl::string_view source);
  // Reads and parses `path`: NotFound / PermissionDenied naming it when it cannot be read;
  // FailedPrecondition when others may read it (naming the fix: chmod 600).
  static absl::StatusOr<AuthTable> Load(const std::string& path);

  // The user named `name`, or nullptr.
  const AuthUser* Find(absl::string_view name) const;
  size_t size() const { return users_.size(); }
  const std::map<std::string, AuthUser, std::less<>>& users() const { return users_; }

  // The credentials of user `name`; with `name` empty, of the table's only user
  // (InvalidArgument when it holds several: name one). NotFound naming the user.
  absl::StatusOr<Credentials> CredentialsOf(absl::string_view name) const;

 private:
  std::map<std::string, AuthUser, std::less<>> users_;
};

// Checks a user name (auth files, --user): 1..64 of [A-Za-z0-9_.-].
absl::Status CheckUserName(absl::string_view name);

}  // namespace unloadkv::rpc

#endif  // UNLOADKV_TRANSPORT_RPC_AUTH_FILE_H_
