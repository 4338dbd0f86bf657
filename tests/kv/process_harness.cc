#include "tests/kv/process_harness.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/support/subprocess.h"
#include "transport/rpc/bootstrap.h"

namespace unloadkv::testing {

Output RunBinary(const std::string& path, const std::vector<std::string>& args,
                 unsigned alarm_seconds) {
  std::vector<std::string> argv{path};
  argv.insert(argv.end(), args.begin(), args.end());
  Child c = Spawn(argv, /*capture_stderr=*/true, alarm_seconds);
  if (c.pid < 0) return {};
  Output o;
  o.out = ReadAll(c.out_fd);
  o.err = ReadAll(c.err_fd);
  close(c.out_fd);
  close(c.err_fd);
  o.exit_code = WaitExit(c.pid);
  return o;
}

ServerProcess::ServerProcess(std::vector<std::string> extra, bool capture_stderr) {
  std::vector<std::string> args{"server/kvserver", "--listen=127.0.0.1:0",
                                "--metrics=", "--arena_bytes=33554432"};
  args.insert(args.end(), extra.begin(), extra.end());
  Child c = Spawn(args, capture_stderr);
  pid_ = c.pid;
  out_ = c.out_fd;
  if (pid_ < 0) return;
  if (capture_stderr) {
    err_ = c.err_fd;
    err_reader_ = std::thread([this] {
      char buf[4096];
      ssize_t n;
      while ((n = read(err_, buf, sizeof(buf))) > 0) {
        std::lock_guard<std::mutex> l(err_mu_);
        err_text_.append(buf, static_cast<size_t>(n));
      }
    });
  }
  // Three start-up lines: the address, the memory, the metrics URL.
  for (int i = 0; i < 3; ++i) {
    std::string line = ReadLine(out_);
    const std::string tag = "listening on ";
    size_t at = line.find(tag);
    if (at != std::string::npos) {
      address_ = line.substr(at + tag.size(), line.find(' ', at + tag.size()) - at - tag.size());
    }
    at = line.find("metrics at http://");
    if (at != std::string::npos) {
      metrics_address_ = line.substr(at + 18, line.find("/metrics") - at - 18);
    }
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Stop();
}

std::string ServerProcess::NextLine() { return ReadLine(out_); }

std::pair<int, std::string> ServerProcess::Stop() {
  kill(pid_, SIGTERM);
  std::string rest = ReadAll(out_);
  const int code = WaitExit(pid_);
  Reaped();
  return {code, rest};
}

void ServerProcess::Kill() {
  kill(pid_, SIGKILL);
  WaitExit(pid_);
  Reaped();
}

void ServerProcess::Reaped() {
  pid_ = -1;
  close(out_);
  if (err_reader_.joinable()) err_reader_.join();  // the pipe ended with the process
  if (err_ >= 0) close(err_);
  err_ = -1;
}

std::string ServerProcess::stderr_text() const {
  std::lock_guard<std::mutex> l(err_mu_);
  return err_text_;
}

Output Cli(const ServerProcess& s, std::vector<std::string> args) {
  args.insert(args.begin(), "--server=" + s.address());
  return RunBinary("client/kvclient", args);
}

uint64_t StatValue(const std::string& stats, const std::string& name) {
  size_t at = stats.find(name + " ");
  return at == std::string::npos ? ~0ull : std::stoull(stats.substr(at + name.size() + 1));
}

std::string Scrape(const std::string& host_port, int timeout_ms, const std::string& path) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  absl::StatusOr<ScopedFd> fd = rpc::Dial(host_port, absl::Milliseconds(timeout_ms));
  if (!fd.ok()) return "";
  if (!rpc::WriteAll(fd->get(), "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n",
                     deadline - absl::Now())
           .ok()) {
    return "";
  }
  std::string all;
  char buf[4096];
  while (true) {
    pollfd p{fd->get(), POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) return "";
    ssize_t n = read(fd->get(), buf, sizeof(buf));
    if (n < 0) return "";
    if (n == 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  size_t body = all.find("\r\n\r\n");
  return body == std::string::npos ? "" : all.substr(body + 4);
}

double Sample(const std::string& metrics, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double v;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &v)) return v;
    }
  }
  return -1;
}

uint64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    uint64_t kib = 0;
    for (absl::string_view part : absl::StrSplit(line.substr(6), ' ', absl::SkipEmpty())) {
      if (absl::SimpleAtoi(part, &kib)) return kib * 1024;
    }
  }
  return 0;
}

}  // namespace unloadkv::testing
