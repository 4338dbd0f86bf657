// Control path of the soft RNIC: device creation, registration, QP set-up and connection.
#include "transport/soft/soft_device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "transport/base/net.h"
#include "transport/rnic/backend_objects.h"
#include "transport/rnic/request_checks.h"
#include "transport/soft/datapath_util.h"
#include "transport/soft/nic.h"

namespace unloadkv::soft {
namespace {

void SetNoDelayNonBlocking(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

// ---------------------------------------------------------------------------- handles

namespace {

class SoftMemoryRegion : public rnic::MemoryRegion {
 public:
  SoftMemoryRegion(const Description& d, std::shared_ptr<Nic> nic)
      : MemoryRegion(d), nic_(std::move(nic)) {}
  ~SoftMemoryRegion() override { nic_->Deregister(rkey()); }

 private:
  std::shared_ptr<Nic> nic_;
};

class SoftCompletionQueue : public rnic::CompletionQueue {
 public:
  SoftCompletionQueue(std::shared_ptr<CqCore> core, std::shared_ptr<Nic> nic)
      : core_(std::move(core)), nic_(std::move(nic)) {}

  int Poll(absl::Span<rnic::WorkCompletion> out) override {
    int n = core_->Poll(out);
    // An owner that waits next (wait_in_read, or progress_on_empty_poll false) reads in that
    // wait rather than here (an epoll_wait that would find nothing yet, then that wait).
    if (n == 0 && !nic_->thread_mode() && nic_->progress_on_empty_poll()) {
      nic_->TryProgress();
      n = core_->Poll(out);
    }
    return n;
  }
  void RequestNotify() override { core_->RequestNotify(); }
  int notify_fd() const override { return core_->notify_fd(); }
  const std::shared_ptr<CqCore>& core() const { return core_; }
  const Nic* nic() const { return nic_.get(); }

 private:
  std::shared_ptr<CqCore> core_;
  std::shared_ptr<Nic> nic_;
};

class SoftSharedReceiveQueue : public rnic::SharedReceiveQueue {
 public:
  SoftSharedReceiveQueue(std::shared_ptr<SrqCore> core, std::shared_ptr<Nic> nic)
      : core_(std::move(core)), nic_(std::move(nic)) {}
  using rnic::SharedReceiveQueue::PostRecv;
  absl::Status PostRecv(absl::Span<const rnic::RecvWorkRequest> wrs) override {
    return nic_->PostSrqRecv(core_.get(), wrs);
  }
  absl::Status ArmLimit(uint32_t limit) override { return nic_->ArmSrqLimit(core_.get(), limit); }
  bool TakeLimitEvent() override { return nic_->TakeSrqLimitEvent(core_.get()); }
  const std::shared_ptr<SrqCore>& core() const { return core_; }
  const Nic* nic() const { return nic_.get(); }

 private:
  std::shared_ptr<SrqCore> core_;
  std::shared_ptr<Nic> nic_;
};

class SoftMemoryWindow : public rnic::MemoryWindow {
 public:
  explicit SoftMemoryWindow(std::shared_ptr<Nic> nic) : nic_(std::move(nic)) {
    nic_->AddWindow(this, &core_);
  }
  ~SoftMemoryWindow() override { nic_->RemoveWindow(this, &core_); }
  uint32_t rkey() const override { return core_.last_key.load(std::memory_order_acquire); }

 private:
  std::shared_ptr<Nic> nic_;
  WindowCore core_;
};

class SoftQueuePair : public rnic::QueuePair {
 public:
  SoftQueuePair(QpCore* core, std::shared_ptr<Nic> nic) : core_(core), nic_(std::move(nic)) {}
  ~SoftQueuePair() override { nic_->DestroyQp(core_); }

  uint32_t qp_num() const override { return core_->qp_num; }
  rnic::QpState state() const override { return nic_->StateOf(core_); }
  rnic::QpAttributes local_attributes() const override {
    return rnic::QpAttributes{"soft", nic_->address(), core_->qp_num, core_->first_psn};
  }
  absl::Status Connect(const rnic::QpAttributes& remote) override {
    return nic_->Connect(core_, remote);
  }
  absl::Status PostSend(absl::Span<const rnic::SendWorkRequest> wrs) override {
    return nic_->PostSend(core_, wrs);
  }
  absl::Status PostRecv(absl::Span<const rnic::RecvWorkRequest> wrs) override {
    return nic_->PostRecv(core_, wrs);
  }
  void SetError() override { nic_->SetError(core_); }

 private:
  QpCore* core_;  // owned by nic_; valid until DestroyQp
  std::shared_ptr<Nic> nic_;
};

}  // namespace

// ---------------------------------------------------------------------------- Nic

Nic::Nic(int listen_fd, std::string address, rnic::DeviceLimits limits, bool thread_mode,
         bool defer_acks, bool hold_acks_until_wait, bool wait_in_read, bool progress_on_empty_poll,
         std::shared_ptr<Domain> domain)
    : listen_fd_(listen_fd),
      epfd_(epoll_create1(EPOLL_CLOEXEC)),
      timer_fd_(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      address_(std::move(address)),
      limits_(limits),
      thread_mode_(thread_mode),
      defer_acks_(defer_acks || hold_acks_until_wait),
      hold_acks_until_wait_(hold_acks_until_wait),
      wait_in_read_(wait_in_read && !thread_mode),
      progress_on_empty_poll_(progress_on_empty_poll && !wait_in_read_),
      domain_(std::move(domain)) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // listener
  epoll_ctl(epfd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.ptr = const_cast<int*>(&timer_fd_);
  epoll_ctl(epfd_, EPOLL_CTL_ADD, timer_fd_, &ev);
  if (!thread_mode_) {
    ev.data.ptr = const_cast<int*>(&wake_fd_);
    epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  }
}

Nic::~Nic() {
  StopThread();
  {
    MutexLock l(&mu_);
    for (auto& s : streams_) FinishClose(s.get());
    streams_.clear();
  }
  close(listen_fd_);
  close(epfd_);
  close(timer_fd_);
  close(wake_fd_);
}

void Nic::StartThread() {
  if (!thread_mode_) return;
  thread_ = std::thread([this] {
    pollfd fds[2] = {{epfd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    while (!stop_.load(std::memory_order_acquire)) {
      ::poll(fds, 2, 1000);
      if (stop_.load(std::memory_order_acquire)) break;
      Progress(absl::ZeroDuration());
    }
  });
}

void Nic::StopThread() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
}

absl::StatusOr<uint32_t> Nic::Register(void* addr, size_t length, uint32_t access) {
  if (absl::Status st = rnic::CheckRegistration(addr, length, access); !st.ok()) return st;
  access &= ~uint32_t{rnic::kHugePageBacked};  // a translation hint; nothing to model here
  MutexLock l(&mu_);
  return domain_->Register(reinterpret_cast<uint64_t>(addr), length, access);
}

void Nic::Deregister(uint32_t key) {
  // No port may be placing a payload into the region when this returns (a NIC's deregistration
  // waits for its DMA): every port's mu_, in port order, around the change.
  // This Nic is among them (SoftDevice::Create lists every port, and the caller's handle
  // keeps this one alive); a port already gone has nothing left to place.
  std::vector<std::shared_ptr<Nic>> ports;
  for (const std::weak_ptr<Nic>& p : domain_->ports()) {
    if (std::shared_ptr<Nic> n = p.lock()) ports.push_back(std::move(n));
  }
  for (const auto& n : ports) n->mu_.Lock();
  domain_->Deregister(key);
  for (auto it = ports.rbegin(); it != ports.rend(); ++it) (*it)->mu_.Unlock();
}

absl::StatusOr<QpCore*> Nic::CreateQp(const rnic::QpConfig& config, std::shared_ptr<CqCore> scq,
                                      std::shared_ptr<CqCore> rcq, std::shared_ptr<SrqCore> srq) {
  if (absl::Status st = rnic::CheckQpConfig(config, limits_); !st.ok()) return st;
  MutexLock l(&mu_);
  auto qp = std::make_unique<QpCore>();
  qp->qp_num = domain_->NewQpNum();
  qp->config = config;
  qp->send_cq = std::move(scq);
  qp->recv_cq = std::move(rcq);
  qp->srq = std::move(srq);
  qp->first_psn = std::random_device{}() & 0xffffff;
  qp->next_psn = qp->first_psn;
  QpCore* raw = qp.get();
  qps_[raw->qp_num] = std::move(qp);
  return raw;
}

void Nic::DestroyQp(QpCore* qp) {
  MutexLock l(&mu_);
  FailQp(qp, rnic::WcStatus::kFlushed, "queue pair destroyed", /*tell_peer=*/true, /*owner=*/true);
  domain_->UnbindAllOf(qp->qp_num, /*forget=*/true);
  ack_soon_.erase(std::remove(ack_soon_.begin(), ack_soon_.end(), qp), ack_soon_.end());
  ack_touched_.erase(std::remove(ack_touched_.begin(), ack_touched_.end(), qp), ack_touched_.end());
  qps_.erase(qp->qp_num);
  FlushDirty();  // its DISCONNECT
}

rnic::QpState Nic::StateOf(const QpCore* qp) {
  MutexLock l(&mu_);
  return qp->state;
}

void Nic::SetError(QpCore* qp) {
  MutexLock l(&mu_);
  FailQp(qp, rnic::WcStatus::kFlushed, "SetError called", /*tell_peer=*/true, /*owner=*/true);
  FlushDirty();  // its DISCONNECT
}

absl::Status Nic::Connect(QpCore* qp, const rnic::QpAttributes& remote) {
  if (remote.transport != "soft") {
    return absl::InvalidArgumentError(absl::StrCat("Connect: peer uses transport '",
                                                   remote.transport, "', this device is 'soft'"));
  }
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(remote.address);
  if (!sa.ok()) return sa.status();
  // The pair's frames travel on a stream between the two devices, dialed by one end: the one
  // with the smaller (QP number, first PSN). Both ends decide alike from the attributes they
  // exchanged; equal pairs (the same QP number and a 1-in-2^24 PSN coincidence) fall back to
  // the addresses. That end's device reuses its stream to the peer device if it has one.
  const auto local_key = std::make_pair(qp->qp_num, qp->first_psn);
  const auto remote_key = std::make_pair(remote.qp_num, remote.psn);
  if (local_key == remote_key && address_ == remote.address) {
    return absl::InvalidArgumentError("Connect: a soft queue pair cannot connect to itself");
  }
  const bool dials = local_key != remote_key ? local_key < remote_key : address_ < remote.address;
  MutexLock l(&mu_);
  if (qp->state != rnic::QpState::kReset) {
    return absl::FailedPreconditionError("Connect: queue pair is not in the reset state");
  }
  if (qp->stream != nullptr &&
      (dials || qp->peer_qp != remote.qp_num || qp->expected_psn != remote.psn)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Connect: peer QP ", qp->peer_qp, " already connected to it, not QP ",
                     remote.qp_num, dials ? " (and this end was to dial)" : ""));
  }
  // Like an RC QP's transition to RTS, Connect succeeds at once and never blocks: what is
  // posted meanwhile waits for the handshake, which must complete within kConnectTimeout.
  if (dials) {
    absl::StatusOr<Stream*> s = StreamTo(remote.address);
    if (!s.ok()) return s.status();  // the QP is as it was
    qp->remote = remote;
    qp->dials = true;
    qp->peer_qp = remote.qp_num;
    qp->stream = *s;
    ++(*s)->attached;
    qp->expected_psn = remote.psn;
    qp->state = rnic::QpState::kReadyToSend;
    qp->peer_deadline = absl::Now() + kConnectTimeout;
    FrameHeader connect;
    connect.type = FrameType::kConnect;
    connect.psn = qp->first_psn;
    connect.qp = qp->peer_qp;
    connect.src_qp = qp->qp_num;
    SetConnectToken(remote.token, &connect);
    Enqueue(qp->stream, connect, nullptr, 0, false);
  } else {
    qp->remote = remote;
    qp->dials = false;
    qp->peer_qp = remote.qp_num;
    qp->state = rnic::QpState::kReadyToSend;
    if (qp->stream != nullptr &&
        CRYPTO_memcmp(qp->offered_token.data(), CanonicalConnectToken(remote.token).data(),
                      rnic::kConnectTokenBytes) != 0) {
      // A CONNECT that came first without this pair's token: a stranger's. Detach its stream
      // and wait for the peer's own CONNECT.
      RefuseConnect(qp->stream, qp->qp_num, qp->peer_qp, "it does not carry the pair's token");
      --qp->stream->attached;
      qp->stream = nullptr;
    }
    if (qp->stream != nullptr) {
      Establish(qp);
    } else {
      qp->peer_deadline = absl::Now() + kConnectTimeout;
    }
  }
  ArmTimerFor(qp->peer_deadline);
  FlushDirty();
  return absl::OkStatus();
}

absl::StatusOr<Stream*> Nic::StreamTo(const std::string& address) {
  if (auto it = outbound_.find(address); it != outbound_.end()) return it->second;
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(address);
  if (!sa.ok()) return sa.status();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("Connect: socket");
  bool connecting = false;
  // Non-blocking: a loopback dial completes at once, a remote one in the background
  // (FinishConnect), failing the QPs on it if nobody answers within kConnectTimeout.
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0) {
    if (errno != EINPROGRESS) {
      absl::Status st = absl::UnavailableError(
          absl::StrCat("Connect: no soft device answers at ", address, ": ", std::strerror(errno)));
      close(fd);
      return st;
    }
    connecting = true;
  }
  SetNoDelayNonBlocking(fd);
  auto stream = std::make_unique<Stream>(this, fd, /*outbound=*/true);
  stream->peer = address;
  Stream* s = stream.get();
  streams_.push_back(std::move(stream));
  outbound_[address] = s;
  epoll_event ev{};
  ev.events = connecting ? EPOLLOUT : EPOLLIN;
  ev.data.ptr = s;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  if (connecting) {
    s->connecting = true;
    s->want_write = true;
    s->handshake_deadline = absl::Now() + kConnectTimeout;
    ArmTimerFor(s->handshake_deadline);
  }
  FrameHeader hello;
  hello.type = FrameType::kHello;
  Enqueue(s, hello, nullptr, 0, false);
  return s;
}

// ---------------------------------------------------------------------------- SoftDevice

namespace {

// A listening socket on host:port (0: a free one); its fd and "host:port" as bound.
absl::StatusOr<std::pair<int, std::string>> ListenOn(const std::string& listen_host,
                                                     uint16_t listen_port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(listen_port);
  if (absl::Status st = ParseHost(listen_host, &sa); !st.ok()) return st;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("soft device: socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    absl::Status st = ErrnoError(absl::StrCat("soft device: bind ", listen_host, ":", listen_port));
    close(fd);
    return st;
  }
  if (listen(fd, 128) != 0) {
    absl::Status st = ErrnoError("soft device: listen");
    close(fd);
    return st;
  }
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &bound.sin_addr, host, sizeof(host));
  return std::make_pair(fd, absl::StrCat(host, ":", ntohs(bound.sin_port)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SoftDevice>> SoftDevice::Create(const Options& options) {
  if (options.ports < 1 || options.ports > kMaxPorts) {
    return absl::InvalidArgumentError(
        absl::StrCat("soft device: ports must be in 1..", kMaxPorts, ", not ", options.ports));
  }
  auto domain = std::make_shared<Domain>(/*shared=*/options.ports > 1);
  std::vector<std::shared_ptr<Nic>> nics;
  for (int i = 0; i < options.ports; ++i) {
    // The first port on the port asked for; the others on free ports of the same host.
    absl::StatusOr<std::pair<int, std::string>> listener =
        ListenOn(options.listen_host, i == 0 ? options.listen_port : 0);
    if (!listener.ok()) return listener.status();
    nics.push_back(std::make_shared<Nic>(listener->first, listener->second, options.limits,
                                         options.progress_thread, options.defer_acks,
                                         options.hold_acks_until_wait, options.wait_in_read,
                                         options.progress_on_empty_poll, domain));
  }
  domain->SetPorts(std::vector<std::weak_ptr<Nic>>(nics.begin(), nics.end()));
  std::unique_ptr<SoftDevice> first(new SoftDevice(nics[0]));
  for (size_t i = 1; i < nics.size(); ++i) {
    first->ports_.push_back(std::unique_ptr<SoftDevice>(new SoftDevice(nics[i])));
  }
  for (const auto& nic : nics) nic->StartThread();
  return first;
}

SoftDevice::~SoftDevice() {
  ports_.clear();
  nic_->StopThread();
}

int SoftDevice::port_count() const { return 1 + static_cast<int>(ports_.size()); }
rnic::Device* SoftDevice::port(int i) {
  if (i == 0) return this;
  if (i < 0 || i > static_cast<int>(ports_.size())) return nullptr;
  return ports_[static_cast<size_t>(i) - 1].get();
}

std::string SoftDevice::address() const { return nic_->address(); }
rnic::DeviceLimits SoftDevice::limits() const {
  rnic::DeviceLimits l = nic_->limits();
  // At most two streams per peer device (one dialed each way), each with its read buffer.
  l.host_bytes_per_peer = 2 * kReadBufferBytes;
  return l;
}
int SoftDevice::event_fd() const { return nic_->thread_mode() ? -1 : nic_->epoll_fd(); }
int SoftDevice::Progress(absl::Duration max_wait) {
  return nic_->thread_mode() ? 0 : nic_->Progress(max_wait);
}
bool SoftDevice::interruptible() const { return !nic_->thread_mode() && !nic_->wait_in_read(); }
void SoftDevice::Interrupt() {
  if (!nic_->thread_mode()) nic_->Interrupt();
}
void SoftDevice::FlushDeferred() { nic_->FlushDeferred(); }
uint64_t SoftDevice::waits_in_read() const { return nic_->waits_in_read(); }

absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> SoftDevice::RegisterMemory(void* addr,
                                                                               size_t length,
                                                                               uint32_t access) {
  absl::StatusOr<uint32_t> key = nic_->Register(addr, length, access);
  if (!key.ok()) return key.status();
  rnic::MemoryRegion::Description d{addr, length, *key, *key, access, 4096};
  return std::unique_ptr<rnic::MemoryRegion>(new SoftMemoryRegion(d, nic_));
}

absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> SoftDevice::AllocateWindow() {
  return std::unique_ptr<rnic::MemoryWindow>(new SoftMemoryWindow(nic_));
}

absl::StatusOr<std::unique_ptr<rnic::CompletionQueue>> SoftDevice::CreateCompletionQueue(
    int capacity) {
  if (capacity <= 0) {
    return absl::InvalidArgumentError("CreateCompletionQueue: capacity must be positive");
  }
  return std::unique_ptr<rnic::CompletionQueue>(
      new SoftCompletionQueue(std::make_shared<CqCore>(), nic_));
}

absl::StatusOr<std::unique_ptr<rnic::QueuePair>> SoftDevice::CreateQueuePair(
    const rnic::QpConfig& config) {
  auto objects =
      rnic::BackendQpObjects<SoftCompletionQueue, SoftSharedReceiveQueue>(config, "soft");
  if (!objects.ok()) return objects.status();
  // A port's progress delivers its QPs' completions and wakes its own waits only.
  if (objects->send_cq->nic() != nic_.get() || objects->recv_cq->nic() != nic_.get()) {
    return absl::InvalidArgumentError(
        "CreateQueuePair: send_cq and recv_cq must be completion queues of this device (port)");
  }
  std::shared_ptr<SrqCore> srq;
  if (objects->srq != nullptr) {
    if (objects->srq->nic() != nic_.get()) {
      return absl::InvalidArgumentError(
          "CreateQueuePair: srq must be a shared receive queue of this device (port)");
    }
    srq = objects->srq->core();
  }
  absl::StatusOr<QpCore*> core =
      nic_->CreateQp(config, objects->send_cq->core(), objects->recv_cq->core(), std::move(srq));
  if (!core.ok()) return core.status();
  return std::unique_ptr<rnic::QueuePair>(new SoftQueuePair(*core, nic_));
}

absl::StatusOr<std::unique_ptr<rnic::SharedReceiveQueue>> SoftDevice::CreateSharedReceiveQueue(
    const rnic::SrqConfig& config) {
  if (absl::Status st = rnic::CheckSrqConfig(config, nic_->limits()); !st.ok()) return st;
  return std::unique_ptr<rnic::SharedReceiveQueue>(
      new SoftSharedReceiveQueue(std::make_shared<SrqCore>(config), nic_));
}

}  // namespace unloadkv::soft
