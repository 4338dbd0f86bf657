// ReadSecretFile: reads a private file; refuses one others may read, a directory, a link, a
// missing file and an oversized one, each with the fix named.
#include "transport/base/secret_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace unloadkv {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

void Write(const std::string& path, const std::string& text, mode_t mode) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

TEST(SecretFileTest, ReadsAPrivateFile) {
  const std::string p = TempPath("private");
  Write(p, "app client 0123456789abcdef\n", 0600);
  absl::StatusOr<std::string> s = ReadSecretFile(p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "app client 0123456789abcdef\n");
  Write(p, "x", 0640);  // a group may read it (a Kubernetes secret with fsGroup)
  EXPECT_TRUE(ReadSecretFile(p).ok());
}

TEST(SecretFileTest, RefusesAFileOthersMayRead) {
  const std::string p = TempPath("public");
  Write(p, "secret", 0644);
  absl::Status st = ReadSecretFile(p).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.message(), "chmod 600 " + p)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "644")) << st;
}

TEST(SecretFileTest, RefusesWhatIsNotAPrivateRegularFile) {
  EXPECT_EQ(ReadSecretFile(TempPath("absent")).status().code(), absl::StatusCode::kNotFound);
  const std::string dir = TempPath("adir");
  mkdir(dir.c_str(), 0700);
  EXPECT_EQ(ReadSecretFile(dir).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string target = TempPath("target"), link = TempPath("link");
  Write(target, "secret", 0600);
  unlink(link.c_str());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  // Followed, as Kubernetes mounts secrets (the mode checked is the target's).
  EXPECT_TRUE(ReadSecretFile(link).ok());
  chmod(target.c_str(), 0604);
  EXPECT_EQ(ReadSecretFile(link).status().code(), absl::StatusCode::kFailedPrecondition);
  Write(target, std::string(100, 'x'), 0600);
  absl::Status big = ReadSecretFile(target, 10).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(big.message(), "at most 10")) << big;
}

}  // namespace
}  // namespace unloadkv
