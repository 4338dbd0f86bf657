#include "transport/storage/posix_disk.h"

#include <sys/resource.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace unloadkv::storage {
namespace {

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/posix_disk_test";
}

TEST(PosixDiskTest, AppendsSyncsReadsListsTruncatesAndRemoves) {
  PosixDisk disk;
  const std::string dir = TempDir() + "/a/b";
  ASSERT_TRUE(disk.CreateDirs(dir).ok());
  ASSERT_TRUE(disk.CreateDirs(dir).ok());  // exists: fine
  {
    auto f = disk.OpenForAppend(dir + "/2.log");
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE((*f)->Append("hello ").ok());
    ASSERT_TRUE((*f)->Append("world").ok());
    ASSERT_TRUE((*f)->Sync().ok());
    EXPECT_EQ((*f)->size(), 11u);
  }
  auto reopened = disk.OpenForAppend(dir + "/2.log");
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->size(), 11u);  // appends at the end
  ASSERT_TRUE((*reopened)->Append("!").ok());
  ASSERT_TRUE(disk.OpenForAppend(dir + "/1.log").ok());
  ASSERT_TRUE(disk.SyncDir(dir).ok());
  EXPECT_EQ(*disk.ReadAll(dir + "/2.log"), "hello world!");
  EXPECT_EQ(*disk.ReadAt(dir + "/2.log", 6, 5), "world");
  EXPECT_EQ(*disk.ReadAt(dir + "/2.log", 6, 100), "world!");  // fewer at the end
  EXPECT_EQ(*disk.ReadAt(dir + "/2.log", 50, 10), "");
  EXPECT_EQ(*disk.List(dir), (std::vector<std::string>{"1.log", "2.log"}));
  ASSERT_TRUE(disk.CreateDirs(TempDir() + "/a/c").ok());
  EXPECT_EQ(*disk.ListDirs(TempDir() + "/a"), (std::vector<std::string>{"b", "c"}));
  ASSERT_TRUE(disk.Truncate(dir + "/2.log", 5).ok());
  EXPECT_EQ(*disk.ReadAll(dir + "/2.log"), "hello");
  ASSERT_TRUE(disk.Remove(dir + "/1.log").ok());
  EXPECT_EQ(*disk.List(dir), (std::vector<std::string>{"2.log"}));
  absl::Status missing = disk.ReadAll(dir + "/1.log").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find(dir + "/1.log"), absl::string_view::npos) << missing;
}

// A file-size limit stands in for a full disk (the test cannot fill a real one): the append
// fails with ResourceExhausted naming the file, and the process lives on (SIGXFSZ ignored).
TEST(PosixDiskTest, AFullDiskIsResourceExhausted) {
  PosixDisk disk;
  const std::string dir = TempDir() + "/full";
  ASSERT_TRUE(disk.CreateDirs(dir).ok());
  auto f = disk.OpenForAppend(dir + "/x.log");
  ASSERT_TRUE(f.ok());
  rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status st = (*f)->Append(std::string(8192, 'x'));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("x.log"), absl::string_view::npos) << st;
  EXPECT_EQ((*f)->size(), 4096u);  // the prefix that fit
}

}  // namespace
}  // namespace unloadkv::storage
