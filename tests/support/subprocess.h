// Child processes for process-level tests and benchmarks: start a binary with its output on
// pipes, read lines, collect the exit status.
#ifndef UNLOADKV_TESTS_SUPPORT_SUBPROCESS_H_
#define UNLOADKV_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace unloadkv::testing {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // the child's stdout
  int err_fd = -1;  // the child's stderr, when captured; else inherited
};

// Starts args[0] with `args`. With `alarm_seconds`, the child is killed (SIGALRM survives exec)
// if it is still running then, so a test never waits forever on it. pid is -1 on failure.
Child Spawn(const std::vector<std::string>& args, bool capture_stderr, unsigned alarm_seconds = 0);
// Reads up to a '\n' (not included) or the end of the stream.
std::string ReadLine(int fd);
// Reads to the end of the stream.
std::string ReadAll(int fd);
// Waits for the child; its exit code, or 128 + the signal that ended it.
int WaitExit(pid_t pid);
// Moves to the runfiles root of the binary `argv0` (`<argv0>.runfiles/unloadkv`) when there
// is one, so that binaries are named relative to it as under `bazel run` and `bazel test`.
void EnterRunfiles(const char* argv0);

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_SUPPORT_SUBPROCESS_H_
