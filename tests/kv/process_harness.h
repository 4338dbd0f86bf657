// Helpers for tests that run kvserver and kvclient as real processes on loopback: spawn,
// capture output, scrape /metrics, read a process's memory. Bounded: every wait has a limit.
#ifndef UNLOADKV_TESTS_KV_PROCESS_HARNESS_H_
#define UNLOADKV_TESTS_KV_PROCESS_HARNESS_H_

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace unloadkv::testing {

struct Output {
  int exit_code = -1;
  std::string out, err;
};

// Runs a binary (path relative to the test's runfiles) to completion, capturing its output;
// killed after `alarm_seconds` if it hangs.
Output RunBinary(const std::string& path, const std::vector<std::string>& args,
                 unsigned alarm_seconds = 30);

// A kvserver process on a free loopback port with a 32 MiB arena and no metrics unless
// `extra` says otherwise (later flags win); SIGTERM and reap on Stop or destruction.
class ServerProcess {
 public:
  // With `capture_stderr`, a thread collects the server's stderr (see stderr_text).
  explicit ServerProcess(std::vector<std::string> extra = {}, bool capture_stderr = false);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& address() const { return address_; }
  // "host:port" of /metrics when started with --metrics=...; read from the start-up lines.
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }
  std::string NextLine();
  // SIGTERM; returns the exit code and the rest of stdout.
  std::pair<int, std::string> Stop();
  // SIGKILL, then reap.
  void Kill();
  // What the server wrote to stderr so far (with capture_stderr).
  std::string stderr_text() const;

 private:
  void Reaped();
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  std::thread err_reader_;
  mutable std::mutex err_mu_;
  std::string err_text_;  // guarded by err_mu_
  std::string address_;
  std::string metrics_address_;
};

// kvclient against `s`.
Output Cli(const ServerProcess& s, std::vector<std::string> args);
// A "name value" line of `kvclient stats` output; ~0 when absent.
uint64_t StatValue(const std::string& stats, const std::string& name);
// GET http://<host:port><path> within `timeout`; the body, or "" on failure.
std::string Scrape(const std::string& host_port, int timeout_ms = 5000,
                   const std::string& path = "/metrics");
// The value of one sample line ("name{labels} value"); -1 when absent.
double Sample(const std::string& metrics, const std::string& series);
// False in sanitizer builds: AddressSanitizer keeps freed memory resident (its quarantine) and
// both sanitizers slow the server several times over, so resident-memory and throughput bounds
// are checked only in plain builds (the figures are printed in every build).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kResourceBoundsAreMeaningful = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kResourceBoundsAreMeaningful = false;
#else
inline constexpr bool kResourceBoundsAreMeaningful = true;
#endif
#else
inline constexpr bool kResourceBoundsAreMeaningful = true;
#endif

// A latency bound for this build: `d` in plain builds, 3x under a sanitizer (which slows both
// the server and the test several times over on two cores). The plain build keeps the strict
// bound; a sanitized run still catches a server that blocks for whole deadlines.
inline absl::Duration Bound(absl::Duration d) { return kResourceBoundsAreMeaningful ? d : 3 * d; }

// Resident memory of a process (VmRSS), in bytes; 0 when unknown.
uint64_t ResidentBytes(pid_t pid);

}  // namespace unloadkv::testing

#endif  // UNLOADKV_TESTS_KV_PROCESS_HARNESS_H_
