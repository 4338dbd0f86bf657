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

#include "absl/strings/escaping.h"
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

// One request (GET without `post`), with the options' TLS files; the body, or why not.
absl::StatusOr<std::string> Fetch(const std::string& url, const EtcdProcess::Options& o,
                                  const std::string* post, const std::string& token,
                                  long timeout_ms) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return absl::ResourceExhaustedError("curl_easy_init");
  std::string body;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: " + token).c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  if (!o.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, o.ca_file.c_str());
  if (!o.client_cert_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, o.client_cert_file.c_str());
    curl_easy_setopt(curl, CURLOPT_SSLKEY, o.client_key_file.c_str());
  }
  if (post != nullptr) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, post->c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(post->size()));
  }
  const CURLcode rc = curl_easy_perform(curl);
  long http = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) return absl::UnavailableError(curl_easy_strerror(rc));
  if (http != 200) return absl::FailedPreconditionError(absl::StrCat("HTTP ", http, ": ", body));
  return body;
}

}  // namespace

std::string EtcdBinary() { return access("/usr/bin/etcd", X_OK) == 0 ? "/usr/bin/etcd" : ""; }

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const Options& options) {
  if (EtcdBinary().empty()) {
    return absl::FailedPreconditionError(
        "etcd is not installed (apt-get install etcd-server; ./quickstart.sh test installs it)");
  }
  std::unique_ptr<EtcdProcess> p(new EtcdProcess());
  p->options_ = options;
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

std::string EtcdProcess::Url(absl::string_view path) const {
  return absl::StrCat(options_.cert_file.empty() ? "http" : "https", "://", endpoint_, path);
}

absl::StatusOr<std::string> EtcdProcess::Post(const std::string& path, const std::string& json,
                                              const std::string& token) const {
  return Fetch(Url(path), options_, &json, token, 5000);
}

absl::StatusOr<std::string> EtcdProcess::EnableAuth(const std::string& root_password,
                                                    const std::string& user,
                                                    const std::string& password,
                                                    const std::string& prefix) {
  auto b64 = [](absl::string_view s) { return absl::Base64Escape(s); };
  // The key range [prefix, prefix with its last byte + 1): everything under the prefix.
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);
  const std::vector<std::pair<std::string, std::string>> steps = {
      {"/v3/auth/user/add", absl::StrCat(R"({"name":"root","password":")", root_password, R"("})")},
      {"/v3/auth/role/add", R"({"name":"root"})"},
      {"/v3/auth/user/grant", R"({"user":"root","role":"root"})"},
      {"/v3/auth/role/add", R"({"name":"unloadkv"})"},
      {"/v3/auth/role/grant",
       absl::StrCat(R"({"name":"unloadkv","perm":{"permType":"READWRITE","key":")", b64(prefix),
                    R"(","range_end":")", b64(end), R"("}})")},
      {"/v3/auth/user/add",
       absl::StrCat(R"({"name":")", user, R"(","password":")", password, R"("})")},
      {"/v3/auth/user/grant", absl::StrCat(R"({"user":")", user, R"(","role":"unloadkv"})")},
      {"/v3/auth/enable", "{}"},
  };
  for (const auto& [path, json] : steps) {
    absl::StatusOr<std::string> r = Post(path, json);
    if (!r.ok())
      return absl::Status(r.status().code(), absl::StrCat(path, ": ", r.status().message()));
  }
  absl::StatusOr<std::string> auth =
      Post("/v3/auth/authenticate",
           absl::StrCat(R"({"name":"root","password":")", root_password, R"("})"));
  if (!auth.ok()) return auth.status();
  const size_t at = auth->find("\"token\":\"");
  if (at == std::string::npos) return absl::InternalError("no token in " + *auth);
  const size_t from = at + 9;
  return auth->substr(from, auth->find('"', from) - from);
}

absl::Status EtcdProcess::Launch() {
  const std::string scheme = options_.cert_file.empty() ? "http" : "https";
  const std::string client = absl::StrCat(scheme, "://127.0.0.1:", client_port_);
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
  if (!options_.cert_file.empty()) {
    args.push_back("--cert-file=" + options_.cert_file);
    args.push_back("--key-file=" + options_.key_file);
    args.push_back("--trusted-ca-file=" + options_.ca_file);
    args.push_back("--client-cert-auth");
  }
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
    absl::StatusOr<std::string> health = Fetch(Url("/health"), options_, nullptr, "", 500);
    if (health.ok() && absl::StrContains(*health, "\"true\"")) return absl::OkStatus();
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
