#include "transport/http/metrics_endpoint.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "transport/base/net.h"

namespace unloadkv::http {

namespace {

// Binds `sa` once with the options civetweb uses, to name the reason a bind fails in plain
// words (civetweb's exception text is about its own internals).
absl::Status ProbeBind(const sockaddr_in& sa, const std::string& address) {
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::UnavailableError("metrics: socket() failed");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address, ": ",
                                               std::strerror(errno),
                                               errno == EADDRINUSE ? " (port in use)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace

// One GET path of the endpoint: writes the page as a complete HTTP/1.1 response.
class MetricsEndpoint::Handler : public CivetHandler {
 public:
  explicit Handler(PageFunction page) : page_(std::move(page)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    const Page p = page_();
    mg_printf(conn,
              "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
              p.content_type.c_str(), p.body.size());
    mg_write(conn, p.body.data(), p.body.size());
    return true;
  }

 private:
  const PageFunction page_;
};

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address, std::shared_ptr<prometheus::Registry> registry) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(address, /*allow_port_zero=*/true);
  if (!sa.ok()) return sa.status();
  if (sa->sin_port != 0) {
    if (absl::Status st = ProbeBind(*sa, address); !st.ok()) return st;
  }
  std::unique_ptr<MetricsEndpoint> m(new MetricsEndpoint());
  // civetweb gives each connection a worker thread until it closes or its request times out,
  // so idle connections could starve scrapes: kThreads workers, and a connection that sends
  // no complete request within kRequestTimeout is closed.
  // Name, value pairs.
  // clang-format off
  const std::vector<std::string> options = {
      "listening_ports",    address,
      "num_threads",        std::to_string(kThreads),
      "request_timeout_ms", std::to_string(absl::ToInt64Milliseconds(kRequestTimeout)),
      "enable_keep_alive",  "no",
      // A connection flood waits in the accept queue instead of losing SYNs (a lost SYN costs
      // a scraper a 1 s retransmission, then 3, then 7...).
      "listen_backlog",     "1024",
      "connection_queue",   "256",
  };
  // clang-format on
  // civetweb reports a failed bind by throwing; nothing else here throws.
  try {
    m->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception&) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", address, " (port in use?)"));
  }
  m->Handle("/metrics", [registry] {
    return Page{"text/plain; version=0.0.4; charset=utf-8",
                prometheus::TextSerializer().Serialize(registry->Collect())};
  });
  std::vector<int> ports = m->server_->getListeningPorts();
  sa->sin_port = htons(static_cast<uint16_t>(ports.empty() ? 0 : ports[0]));
  m->host_port_ = FormatHostPort(*sa);
  m->base_url_ = absl::StrCat("http://", m->host_port_);
  m->url_ = m->base_url_ + "/metrics";
  return m;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (server_ != nullptr) server_->close();  // joins its threads before the handlers go
}

void MetricsEndpoint::Handle(const std::string& path, PageFunction page) {
  handlers_.push_back(std::make_unique<Handler>(std::move(page)));
  server_->addHandler(path + "$", handlers_.back().get());  // "$": this path exactly
}

}  // namespace unloadkv::http
