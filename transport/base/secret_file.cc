#include "transport/base/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/base/net.h"

namespace unloadkv {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, size_t max_bytes) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    const std::string why = absl::StrCat("cannot read ", path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(why);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(why);
    return absl::UnavailableError(why);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return ErrnoError(absl::StrCat("stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s holds secrets but others may access it (mode %03o); run: chmod 600 %s",
                        path, st.st_mode & 0777, path));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", st.st_size, " bytes; at most ", max_bytes, " expected"));
  }
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(absl::StrCat("read ", path));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is larger than ", max_bytes, " bytes"));
    }
  }
  return out;
}

}  // namespace unloadkv
