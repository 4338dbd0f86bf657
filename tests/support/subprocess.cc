#include "tests/support/subprocess.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace unloadkv::testing {

Child Spawn(const std::vector<std::string>& args, bool capture_stderr, unsigned alarm_seconds) {
  int out[2], err[2] = {-1, -1};
  if (pipe(out) != 0 || (capture_stderr && pipe(err) != 0)) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    if (capture_stderr) {
      dup2(err[1], 2);
      close(err[0]);
    }
    if (alarm_seconds > 0) alarm(alarm_seconds);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  if (capture_stderr) close(err[1]);
  return Child{pid, out[0], capture_stderr ? err[0] : -1};
}

std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void EnterRunfiles(const char* argv0) {
  const std::string dir = std::string(argv0) + ".runfiles/unloadkv";
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) (void)!chdir(dir.c_str());
}

}  // namespace unloadkv::testing
