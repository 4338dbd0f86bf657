#include "tests/support/etcd_process.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace unloadkv::testing {
namespace {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  close(fd);
  return port;
}

size_t Collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

bool Healthy(const std::string& endpoint) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return false;
  std::string body;
  const std::string url = absl::StrCat("http://", endpoint, "/health");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 500L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  const bool ok = curl_easy_perform(curl) == CURLE_OK && absl::StrContains(body, "\"true\"");
  curl_easy_cleanup(curl);
  return ok;
}

}  // namespace

std::string EtcdBinary() { return access("/usr/bin/etcd", X_OK) == 0 ? "/usr/bin/etcd" : ""; }

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start() {
  if (EtcdBinary().empty()) {
    return absl::FailedPreconditionError(
        "etcd is not installed (apt-get install etcd-server; ./quickstart.sh test installs it)");
  }
  std::unique_ptr<EtcdProcess> p(new EtcdProcess());
  const char* tmp = getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/etcd-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, " failed"));
  }
  p->dir_ = templ;
  // A port can be taken between FreePort and etcd's bind: try a few pairs.
  absl::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    p->client_port_ = FreePort();
    p->peer_port_ = FreePort();
    p->endpoint_ = absl::StrCat("127.0.0.1:", p->client_port_);
    last = p->Launch();
    if (last.ok()) return p;
    p->Stop();
  }
  return last;
}

absl::Status EtcdProcess::Launch() {
  const std::string client = absl::StrCat("http://127.0.0.1:", client_port_);
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
  std::vector<std::string> args{
      EtcdBinary(), "--name=test", absl::StrCat("--data-dir=", dir_, "/data"),
      absl::StrCat("--listen-client-urls=", client),
      absl::StrCat("--advertise-client-urls=", client), absl::StrCat("--listen-peer-urls=", peer),
      absl::StrCat("--initial-advertise-peer-urls=", peer),
      absl::StrCat("--initial-cluster=test=", peer),
      // Fast elections: etcd's shortest lease is 1.5 election
      // timeouts, so 1 s leases need a timeout under 666 ms.
      "--heartbeat-interval=25", "--election-timeout=250", "--logger=zap", "--log-level=warn"};
  const std::string log = absl::StrCat(dir_, "/etcd.log");
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid_ < 0) return absl::InternalError("fork failed");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (Healthy(endpoint_)) return absl::OkStatus();
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat("etcd exited at start: ", LogTail()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("etcd at ", endpoint_, " not healthy within 20 s: ", LogTail()));
}

EtcdProcess::~EtcdProcess() { Stop(); }

void EtcdProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

absl::Status EtcdProcess::Restart() {
  Stop();
  return Launch();
}

std::string EtcdProcess::LogTail() const {
  std::ifstream in(absl::StrCat(dir_, "/etcd.log"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

}  // namespace unloadkv::testing
