// Reading a file that holds secrets (an auth file, etcd's password): secrets come from files,
// never from flags, and a file others may read holds no secret.
#ifndef UNLOADKV_TRANSPORT_BASE_SECRET_FILE_H_
#define UNLOADKV_TRANSPORT_BASE_SECRET_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace unloadkv {

// The contents of the regular file `path` (links followed: the target's mode counts), at most
// `max_bytes`. Errors name the file and the
// fix: NotFound or PermissionDenied when it cannot be opened, FailedPrecondition when it is
// not a regular file or others may read or write it (mode o-rwx, "chmod 600 PATH"),
// InvalidArgument when it is larger than `max_bytes`.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, size_t max_bytes = 1 << 20);

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_SECRET_FILE_H_
