#include "transport/cluster/etcd_gateway.h"

#include <curl/curl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "transport/base/net.h"
#include "transport/base/secret_file.h"
#include "transport/cluster/etcd_gateway.pb.h"

namespace unloadkv::cluster {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Owns one easy handle and its header list.
struct Request {
  CURL* curl = curl_easy_init();
  curl_slist* headers = nullptr;
  ~Request() {
    curl_slist_free_all(headers);
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

void Prepare(Request* r, const std::string& url, const std::string& body,
             const EtcdSecurity& security, const std::string& token) {
  r->headers = curl_slist_append(r->headers, "Content-Type: application/json");
  if (!token.empty()) {
    r->headers = curl_slist_append(r->headers, absl::StrCat("Authorization: ", token).c_str());
  }
  if (!security.ca_file.empty()) {
    curl_easy_setopt(r->curl, CURLOPT_CAINFO, security.ca_file.c_str());
    curl_easy_setopt(r->curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(r->curl, CURLOPT_SSL_VERIFYHOST, 2L);
  }
  if (!security.cert_file.empty()) {
    curl_easy_setopt(r->curl, CURLOPT_SSLCERT, security.cert_file.c_str());
    curl_easy_setopt(r->curl, CURLOPT_SSLKEY, security.key_file.c_str());
  }
  curl_easy_setopt(r->curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, r->headers);
  curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(r->curl, CURLOPT_PROXY, "");  // loopback and cluster-internal: never a proxy
}

absl::StatusCode FromGrpcCode(int code) {
  if (code <= 0 || code > 16) return absl::StatusCode::kUnknown;
  return static_cast<absl::StatusCode>(code);  // absl's codes are gRPC's
}

// An answer with an HTTP error status: the gateway's error body.
absl::Status GatewayFailure(const std::string& where, long http, const std::string& body) {
  if (http == 400 && body.find("HTTP request to an HTTPS server") != std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd at ", where, " serves https: give --etcd_ca (and --etcd_cert with --etcd_key if ",
        "it requires client certificates)"));
  }
  etcd::GatewayError e;
  if (FromGatewayJson(body, &e).ok() && (e.code() != 0 || !e.message().empty())) {
    return absl::Status(
        FromGrpcCode(e.code()),
        absl::StrCat("etcd at ", where, ": ", e.message().empty() ? e.error() : e.message()));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd at ", where, " answered HTTP ", http, ": ", body.substr(0, 200)));
}

bool IsTlsFailure(CURLcode rc) {
  switch (rc) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string ToGatewayJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

absl::Status FromGatewayJson(absl::string_view json, google::protobuf::Message* m) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto s = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), m, options);
  if (!s.ok()) {
    return absl::DataLossError(
        absl::StrCat("etcd's answer does not parse (", s.ToString(), "): ", json.substr(0, 200)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EtcdGateway>> EtcdGateway::Create(absl::string_view endpoints,
                                                                 absl::Duration timeout,
                                                                 const EtcdSecurity& security) {
  GlobalInit();
  std::vector<std::string> list;
  for (absl::string_view e : absl::StrSplit(endpoints, ',')) {
    if (absl::StatusOr<sockaddr_in> sa = ParseHostPort(e); !sa.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd: \"", e, "\" is not HOST:PORT: ", sa.status().message()));
    }
    list.emplace_back(e);
  }
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError("--etcd_cert and --etcd_key go together");
  }
  if (!security.cert_file.empty() && security.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--etcd_cert needs --etcd_ca (the CA that signed etcd's certificate)");
  }
  if (security.user.empty() != security.password_file.empty()) {
    return absl::InvalidArgumentError("--etcd_user and --etcd_password_file go together");
  }
  for (const std::string* f : {&security.ca_file, &security.cert_file}) {
    if (!f->empty() && access(f->c_str(), R_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("cannot read ", *f, ": ", std::strerror(errno)));
    }
  }
  std::string password;
  if (!security.key_file.empty()) {
    // A private key is a secret like any other: refused if others may read it.
    if (absl::StatusOr<std::string> key = ReadSecretFile(security.key_file); !key.ok()) {
      return key.status();
    }
  }
  if (!security.password_file.empty()) {
    absl::StatusOr<std::string> p = ReadSecretFile(security.password_file, 4096);
    if (!p.ok()) return p.status();
    password = std::string(absl::StripTrailingAsciiWhitespace(*p));
    if (password.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(security.password_file, " is empty"));
    }
  }
  return std::unique_ptr<EtcdGateway>(new EtcdGateway(std::move(list), std::string(endpoints),
                                                      timeout, security, std::move(password)));
}

absl::StatusOr<std::string> EtcdGateway::Token() {
  if (security_.user.empty()) return std::string();
  {
    std::lock_guard<std::mutex> l(token_mu_);
    if (!token_.empty()) return token_;
  }
  etcd::AuthenticateRequest req;
  req.set_name(security_.user);
  req.set_password(password_);
  etcd::AuthenticateResponse resp;
  if (absl::Status st = CallOnce("/v3/auth/authenticate", ToGatewayJson(req), "", &resp);
      !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("authenticating to etcd as user \"", security_.user,
                                                "\": ", st.message()));
  }
  if (resp.token().empty()) {
    return absl::FailedPreconditionError(
        "etcd returned no auth token: is authentication enabled (etcdctl auth enable)?");
  }
  std::lock_guard<std::mutex> l(token_mu_);
  token_ = resp.token();
  return token_;
}

void EtcdGateway::ForgetToken(const std::string& stale) {
  std::lock_guard<std::mutex> l(token_mu_);
  if (token_ == stale) token_.clear();
}

absl::Status EtcdGateway::Call(absl::string_view path, const google::protobuf::Message& request,
                               google::protobuf::Message* response) {
  const std::string body = ToGatewayJson(request);
  absl::StatusOr<std::string> token = Token();
  if (!token.ok()) return token.status();
  absl::Status st = CallOnce(path, body, *token, response);
  if (st.code() == absl::StatusCode::kUnauthenticated && !token->empty()) {
    // The token expired (etcd's simple tokens live 5 minutes unused): once more with a new one.
    ForgetToken(*token);
    token = Token();
    if (!token.ok()) return token.status();
    st = CallOnce(path, body, *token, response);
  }
  return st;
}

absl::Status EtcdGateway::CallOnce(absl::string_view path, const std::string& body,
                                   const std::string& token, google::protobuf::Message* response) {
  std::string last_error;
  const size_t first = preferred_.load();
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t at = (first + i) % endpoints_.size();
    Request r;
    if (r.curl == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
    std::string answer;
    Prepare(&r, absl::StrCat(scheme(), "://", endpoints_[at], path), body, security_, token);
    curl_easy_setopt(r.curl, CURLOPT_WRITEFUNCTION, AppendBody);
    curl_easy_setopt(r.curl, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(r.curl, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(timeout_)));
    curl_easy_setopt(r.curl, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(timeout_)));
    const CURLcode rc = curl_easy_perform(r.curl);
    if (rc != CURLE_OK) {
      // An https etcd answers plain HTTP by closing the connection.
      const bool maybe_https = rc == CURLE_GOT_NOTHING && security_.ca_file.empty();
      last_error = absl::StrCat(endpoints_[at], ": ", curl_easy_strerror(rc),
                                maybe_https ? "; if etcd serves https, give --etcd_ca" : "");
      if (IsTlsFailure(rc)) {
        // Not a host that is down: a certificate or protocol mismatch, the same at every try.
        return absl::FailedPreconditionError(absl::StrCat(
            "etcd at ", endpoints_[at], ": TLS failed: ", curl_easy_strerror(rc),
            security_.ca_file.empty() ? " (does etcd serve https? give --etcd_ca)" : ""));
      }
      continue;  // try the next endpoint
    }
    preferred_.store(at);
    long http = 0;
    curl_easy_getinfo(r.curl, CURLINFO_RESPONSE_CODE, &http);
    if (http != 200) return GatewayFailure(endpoints_[at], http, answer);
    return FromGatewayJson(answer, response);
  }
  return absl::UnavailableError(absl::StrCat("etcd unreachable (", last_error, ")"));
}

namespace {
struct StreamState {
  std::string pending;
  const std::function<bool(absl::string_view)>* on_line;
  bool stopped_by_callback = false;
};

size_t StreamBody(char* data, size_t size, size_t n, void* arg) {
  auto* st = static_cast<StreamState*>(arg);
  st->pending.append(data, size * n);
  size_t start = 0;
  for (size_t nl; (nl = st->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    absl::string_view line(st->pending.data() + start, nl - start);
    if (!line.empty() && !(*st->on_line)(line)) {
      st->stopped_by_callback = true;
      return 0;  // aborts the transfer
    }
  }
  st->pending.erase(0, start);
  return size * n;
}

}  // namespace

absl::Status EtcdGateway::Stream(absl::string_view path, const google::protobuf::Message& request,
                                 const std::function<bool(absl::string_view line)>& on_line,
                                 const std::atomic<bool>* stop) {
  const std::string body = ToGatewayJson(request);
  const size_t at = preferred_.load() % endpoints_.size();
  // A stream is opened rarely (at start and after a break): a fresh token each time, so one
  // that expired meanwhile never stops the watch for good.
  if (!security_.user.empty()) {
    std::lock_guard<std::mutex> l(token_mu_);
    token_.clear();
  }
  absl::StatusOr<std::string> token = Token();
  if (!token.ok()) return token.status();
  Request r;
  if (r.curl == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  StreamState st;
  st.on_line = &on_line;
  Prepare(&r, absl::StrCat(scheme(), "://", endpoints_[at], path), body, security_, *token);
  curl_easy_setopt(r.curl, CURLOPT_WRITEFUNCTION, StreamBody);
  curl_easy_setopt(r.curl, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(r.curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(timeout_)));
  curl_easy_setopt(r.curl, CURLOPT_TCP_KEEPALIVE, 1L);
  // A multi handle so that the wait for data wakes every 100 ms to look at *stop.
  CURLM* multi = curl_multi_init();
  if (multi == nullptr) return absl::ResourceExhaustedError("curl_multi_init failed");
  curl_multi_add_handle(multi, r.curl);
  int running = 1;
  while (running > 0 && !stop->load() && !st.stopped_by_callback) {
    if (curl_multi_perform(multi, &running) != CURLM_OK) break;
    if (running > 0) curl_multi_poll(multi, nullptr, 0, 100, nullptr);
  }
  CURLcode rc = CURLE_OK;
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
    if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
  }
  curl_multi_remove_handle(multi, r.curl);
  curl_multi_cleanup(multi);
  if (stop->load() || st.stopped_by_callback) return absl::OkStatus();
  if (rc != CURLE_OK) {
    // Another endpoint may serve the next attempt.
    preferred_.store((at + 1) % endpoints_.size());
    return absl::UnavailableError(
        absl::StrCat("etcd at ", endpoints_[at], ": stream ended: ", curl_easy_strerror(rc)));
  }
  long http = 0;
  curl_easy_getinfo(r.curl, CURLINFO_RESPONSE_CODE, &http);
  if (http != 200) return GatewayFailure(endpoints_[at], http, st.pending);
  return absl::UnavailableError(absl::StrCat("etcd at ", endpoints_[at], ": stream closed"));
}

}  // namespace unloadkv::cluster
