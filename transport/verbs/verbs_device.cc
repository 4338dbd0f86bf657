// Control and data path of the verbs backend (a thin adapter; see verbs_mapping for the logic).
#include "transport/verbs/verbs_device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/rnic/backend_objects.h"
#include "transport/rnic/key_source.h"
#include "transport/rnic/request_checks.h"
#include "transport/rnic/srq_state.h"
#include "transport/verbs/verbs_mapping.h"

namespace unloadkv::verbs {
namespace {

absl::Status VerbError(absl::string_view verb, int err) {
  std::string hint;
  if (err == ENOMEM) hint = " (locked memory exhausted? check RLIMIT_MEMLOCK: ulimit -l)";
  if (err == EPERM || err == EACCES) hint = " (permission: run as a user allowed to use RDMA)";
  return absl::UnavailableError(absl::StrCat(verb, " failed: ", std::strerror(err), hint));
}

// Copies a request's SGEs into the array libibverbs reads.
template <typename Wr>
void FillSges(const Wr& w, ibv_sge* out) {
  for (int k = 0; k < w.num_sge; ++k) {
    out[k] = {w.sg_list[k].addr, w.sg_list[k].length, w.sg_list[k].lkey};
  }
}

// The status for a failed ibv_post_send/ibv_post_recv of request `index`: a full queue is
// RESOURCE_EXHAUSTED (the caller retries later), anything else the verb's error.
absl::Status PostError(absl::string_view verb, absl::string_view queue, size_t index, int err) {
  if (err == ENOMEM) {
    return absl::ResourceExhaustedError(
        absl::StrCat(verb, ": request ", index, ": ", queue, " queue full"));
  }
  return VerbError(absl::StrCat(verb, " (request ", index, ")"), err);
}

// Checks and posts receives one at a time with `post` (ibv_post_recv or ibv_post_srq_recv,
// named `verb`, for the `queue` named in a full-queue error).
template <typename Post>
absl::Status PostReceives(absl::Span<const rnic::RecvWorkRequest> wrs, absl::string_view verb,
                          absl::string_view queue, Post post) {
  for (size_t i = 0; i < wrs.size(); ++i) {
    if (absl::Status st = rnic::CheckRecvRequest(wrs[i], i); !st.ok()) return st;
    const rnic::RecvWorkRequest& w = wrs[i];
    ibv_sge sge[rnic::kMaxSge];
    FillSges(w, sge);
    ibv_recv_wr wr{};
    wr.wr_id = w.wr_id;
    wr.sg_list = sge;
    wr.num_sge = w.num_sge;
    ibv_recv_wr* bad = nullptr;
    if (int e = post(&wr, &bad)) return PostError(verb, queue, i, e);
  }
  return absl::OkStatus();
}

class VerbsMemoryRegion : public rnic::MemoryRegion {
 public:
  VerbsMemoryRegion(const Description& d, ibv_mr* mr) : MemoryRegion(d), mr_(mr) {}
  ~VerbsMemoryRegion() override { ibv_dereg_mr(mr_); }
  ibv_mr* mr() const { return mr_; }

 private:
  ibv_mr* mr_;
};

// A type-2 window. Its key's upper 24 bits are the device's index; each bind draws the tag.
class VerbsMemoryWindow : public rnic::MemoryWindow {
 public:
  explicit VerbsMemoryWindow(ibv_mw* mw) : mw_(mw), rkey_(mw->rkey) {}
  ~VerbsMemoryWindow() override { ibv_dealloc_mw(mw_); }
  uint32_t rkey() const override { return rkey_.load(std::memory_order_acquire); }
  ibv_mw* mw() const { return mw_; }
  // The key the next bind gives the window (set once it is posted).
  uint32_t NextKey() const {
    thread_local rnic::KeySource keys = rnic::KeySource::Random();  // draws ahead, per thread
    const uint32_t random = keys.Next([](uint32_t) { return false; });
    return NextWindowKey(rkey(), static_cast<uint8_t>(random));
  }
  void set_rkey(uint32_t key) { rkey_.store(key, std::memory_order_release); }

 private:
  ibv_mw* mw_;
  std::atomic<uint32_t> rkey_;
};

// Fills the bind part of `wr` from `w`; InvalidArgument for another backend's objects.
absl::Status FillBind(const rnic::WindowBind& b, size_t index, ibv_send_wr* wr,
                      VerbsMemoryWindow** window, uint32_t* key) {
  auto* mw = dynamic_cast<VerbsMemoryWindow*>(b.window);
  auto* mr = dynamic_cast<const VerbsMemoryRegion*>(b.region);
  if (mw == nullptr || mr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("PostSend: request ", index, " binds a window or region of another device"));
  }
  *window = mw;
  *key = mw->NextKey();
  wr->bind_mw.mw = mw->mw();
  wr->bind_mw.rkey = *key;
  wr->bind_mw.bind_info.mr = mr->mr();
  wr->bind_mw.bind_info.addr = b.addr;
  wr->bind_mw.bind_info.length = b.length;
  wr->bind_mw.bind_info.mw_access_flags = static_cast<unsigned int>(MapAccess(b.access));
  return absl::OkStatus();
}

class VerbsCompletionQueue : public rnic::CompletionQueue {
 public:
  VerbsCompletionQueue(ibv_comp_channel* channel, ibv_cq* cq) : channel_(channel), cq_(cq) {}
  ~VerbsCompletionQueue() override {
    ibv_destroy_cq(cq_);
    ibv_destroy_comp_channel(channel_);
  }
  int Poll(absl::Span<rnic::WorkCompletion> out) override {
    ibv_wc wc[32];
    int want = static_cast<int>(std::min<size_t>(out.size(), 32));
    int n = ibv_poll_cq(cq_, want, wc);
    for (int i = 0; i < n; ++i) {
      rnic::WorkCompletion& w = out[i];
      w.wr_id = wc[i].wr_id;
      w.status = MapWcStatus(wc[i].status);
      w.opcode = MapWcOpcode(wc[i].opcode);
      w.byte_len = wc[i].byte_len;
      w.has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
      w.imm = w.has_imm ? ntohl(wc[i].imm_data) : 0;
      w.has_invalidate = (wc[i].wc_flags & IBV_WC_WITH_INV) != 0;
      w.invalidated_rkey = w.has_invalidate ? wc[i].invalidated_rkey : 0;
      w.qp_num = wc[i].qp_num;
    }
    return n < 0 ? 0 : n;
  }
  void RequestNotify() override {
    ibv_cq* ev_cq;
    void* ev_ctx;
    while (ibv_get_cq_event(channel_, &ev_cq, &ev_ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
    ibv_req_notify_cq(cq_, 0);
  }
  int notify_fd() const override { return channel_->fd; }
  ibv_cq* cq() const { return cq_; }

 private:
  ibv_comp_channel* channel_;
  ibv_cq* cq_;
};

// The verbs SRQ. Differs from the soft and sim ones in one way: a receive's buffers cannot be
// checked at post (the hardware finds a bad lkey when a QP takes it, and that QP fails).
class VerbsSharedReceiveQueue : public rnic::SharedReceiveQueue {
 public:
  VerbsSharedReceiveQueue(VerbsDevice* device, uint32_t max_wr)
      : device_(device), max_wr_(max_wr) {}
  ~VerbsSharedReceiveQueue() override {
    if (srq_ != nullptr) ibv_destroy_srq(srq_);
  }
  // Second step of construction: the SRQ's context points at this object's event flag.
  absl::Status Create(ibv_pd* pd, const rnic::SrqConfig& config) {
    ibv_srq_init_attr init{};
    init.srq_context = &limit_event_;
    init.attr.max_wr = config.max_wr;
    init.attr.max_sge = rnic::kMaxSge;
    srq_ = ibv_create_srq(pd, &init);
    if (srq_ == nullptr) return VerbError("ibv_create_srq", errno);
    return config.limit > 0 ? ArmLimit(config.limit) : absl::OkStatus();
  }
  using rnic::SharedReceiveQueue::PostRecv;
  absl::Status PostRecv(absl::Span<const rnic::RecvWorkRequest> wrs) override {
    return PostReceives(
        wrs, "ibv_post_srq_recv", "shared receive",
        [this](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_srq_recv(srq_, wr, bad); });
  }
  absl::Status ArmLimit(uint32_t limit) override {
    if (limit > max_wr_) {
      return absl::InvalidArgumentError(
          absl::StrCat("ArmLimit: limit ", limit, " above max_wr ", max_wr_));
    }
    ibv_srq_attr attr{};
    attr.srq_limit = limit;
    if (int e = ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT)) return VerbError("ibv_modify_srq", e);
    return absl::OkStatus();
  }
  bool TakeLimitEvent() override {
    device_->DrainAsyncEvents();
    return limit_event_.exchange(false);
  }
  ibv_srq* srq() const { return srq_; }

 private:
  VerbsDevice* device_;
  const uint32_t max_wr_;
  ibv_srq* srq_ = nullptr;
  std::atomic<bool> limit_event_{false};  // set by DrainAsyncEvents
};

class VerbsQueuePair : public rnic::QueuePair {
 public:
  VerbsQueuePair(ibv_qp* qp, const VerbsDevice::Options& o, std::string address, int mtu,
                 rnic::QpConfig config, uint64_t max_msg)
      : qp_(qp),
        o_(o),
        address_(std::move(address)),
        mtu_(mtu),
        config_(config),
        max_msg_(max_msg),
        psn_(std::random_device{}() & 0xffffff) {}
  ~VerbsQueuePair() override { ibv_destroy_qp(qp_); }

  uint32_t qp_num() const override { return qp_->qp_num; }
  rnic::QpState state() const override {
    ibv_qp_attr attr;
    ibv_qp_init_attr init;
    if (ibv_query_qp(qp_, &attr, IBV_QP_STATE, &init) != 0) return rnic::QpState::kError;
    if (attr.qp_state == IBV_QPS_RTS) return rnic::QpState::kReadyToSend;
    if (attr.qp_state == IBV_QPS_ERR || attr.qp_state == IBV_QPS_SQE) return rnic::QpState::kError;
    return rnic::QpState::kReset;
  }
  rnic::QpAttributes local_attributes() const override {
    return rnic::QpAttributes{"verbs", address_, qp_->qp_num, psn_};
  }
  absl::Status Connect(const rnic::QpAttributes& remote) override {
    if (remote.transport != "verbs") {
      return absl::InvalidArgumentError(absl::StrCat(
          "Connect: peer uses transport '", remote.transport, "', this device is 'verbs'"));
    }
    absl::StatusOr<VerbsAddress> peer = DecodeVerbsAddress(remote.address);
    if (!peer.ok()) return peer.status();
    absl::StatusOr<int> mtu = MapMtu(std::min(mtu_, peer->mtu_bytes));
    if (!mtu.ok()) return mtu.status();
    RnrSettings rnr = MapRnrTimeout(config_.rnr_timeout);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(o_.port);
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (int e = ibv_modify_qp(
            qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
      return VerbError("ibv_modify_qp(INIT)", e);
    }
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = static_cast<ibv_mtu>(*mtu);
    a.dest_qp_num = remote.qp_num;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = rnr.min_rnr_timer;
    a.ah_attr.dlid = peer->lid;
    a.ah_attr.port_num = static_cast<uint8_t>(o_.port);
    bool global = false;
    for (uint8_t b : peer->gid) global |= b != 0;
    if (global) {  // RoCE: route by GID
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, peer->gid.data(), 16);
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(o_.gid_index);
      a.ah_attr.grh.hop_limit = 64;
    }
    if (int e =
            ibv_modify_qp(qp_, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      return VerbError("ibv_modify_qp(RTR)", e);
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<uint8_t>(o_.timeout);
    a.retry_cnt = static_cast<uint8_t>(o_.retry_cnt);
    a.rnr_retry = rnr.rnr_retry;
    a.sq_psn = psn_;
    a.max_rd_atomic = 16;
    if (int e = ibv_modify_qp(qp_, &a,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
      return VerbError("ibv_modify_qp(RTS)", e);
    }
    return absl::OkStatus();
  }
  absl::Status PostSend(absl::Span<const rnic::SendWorkRequest> wrs) override {
    rnic::DeviceLimits limits;
    limits.max_message_bytes = max_msg_;
    for (size_t i = 0; i < wrs.size(); ++i) {
      if (absl::Status st = rnic::CheckSendRequest(wrs[i], limits, i); !st.ok()) return st;
      const rnic::SendWorkRequest& w = wrs[i];
      ibv_sge sge[rnic::kMaxSge];
      FillSges(w, sge);
      ibv_send_wr wr{};
      wr.wr_id = w.wr_id;
      wr.sg_list = sge;
      wr.num_sge = w.num_sge;
      wr.opcode = static_cast<ibv_wr_opcode>(MapSendOpcode(w.opcode));
      wr.send_flags = w.signaled ? IBV_SEND_SIGNALED : 0;
      if (w.opcode == rnic::Opcode::kWriteWithImm || w.opcode == rnic::Opcode::kSendWithImm) {
        wr.imm_data = htonl(w.imm);
      }
      VerbsMemoryWindow* window = nullptr;
      uint32_t window_key = 0;
      switch (w.opcode) {
        case rnic::Opcode::kBindWindow:
          if (absl::Status st = FillBind(w.bind, i, &wr, &window, &window_key); !st.ok()) {
            return st;
          }
          break;
        case rnic::Opcode::kLocalInvalidate:
        case rnic::Opcode::kSendWithInvalidate:
          wr.invalidate_rkey = w.invalidate_rkey;
          break;
        case rnic::Opcode::kWrite:
        case rnic::Opcode::kWriteWithImm:
        case rnic::Opcode::kRead:
          wr.wr.rdma.remote_addr = w.remote_addr;
          wr.wr.rdma.rkey = w.rkey;
          break;
        default:
          break;
      }
      ibv_send_wr* bad = nullptr;
      if (int e = ibv_post_send(qp_, &wr, &bad)) return PostError("ibv_post_send", "send", i, e);
      if (window != nullptr) window->set_rkey(window_key);
    }
    return absl::OkStatus();
  }
  absl::Status PostRecv(absl::Span<const rnic::RecvWorkRequest> wrs) override {
    if (config_.srq != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("PostRecv: queue pair ", qp_->qp_num, " takes its receives from an SRQ"));
    }
    return PostReceives(
        wrs, "ibv_post_recv", "receive",
        [this](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp_, wr, bad); });
  }
  void SetError() override {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_, &a, IBV_QP_STATE);
  }

 private:
  ibv_qp* qp_;
  VerbsDevice::Options o_;
  std::string address_;
  int mtu_;
  rnic::QpConfig config_;
  uint64_t max_msg_;
  uint32_t psn_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VerbsDevice>> VerbsDevice::Create(const Options& options) {
  if (!MapMtu(options.mtu_bytes).ok()) return MapMtu(options.mtu_bytes).status();
  int num = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (list == nullptr || num == 0) {
    int err = errno;
    if (list != nullptr) ibv_free_device_list(list);
    return NoDeviceError(err);
  }
  std::unique_ptr<VerbsDevice> d(new VerbsDevice());
  d->options_ = options;
  std::string names;
  for (int i = 0; i < num && d->ctx_ == nullptr; ++i) {
    std::string name = ibv_get_device_name(list[i]);
    absl::StrAppend(&names, names.empty() ? "" : ", ", name);
    if (!options.device_name.empty() && name != options.device_name) continue;
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_port_attr port{};
    if (ibv_query_port(ctx, static_cast<uint8_t>(options.port), &port) != 0 ||
        port.state != IBV_PORT_ACTIVE) {
      ibv_close_device(ctx);
      if (!options.device_name.empty()) {
        ibv_free_device_list(list);
        return absl::FailedPreconditionError(
            absl::StrCat("RDMA device ", name, " port ", options.port,
                         " is not active (check the link and `rdma link show`)"));
      }
      continue;
    }
    d->ctx_ = ctx;
    d->name_ = name;
    d->active_mtu_bytes_ = 128 << port.active_mtu;
    VerbsAddress addr;
    addr.lid = port.lid;
    addr.port = static_cast<uint8_t>(options.port);
    addr.mtu_bytes = std::min(options.mtu_bytes, d->active_mtu_bytes_);
    ibv_gid gid{};
    if (ibv_query_gid(ctx, static_cast<uint8_t>(options.port), options.gid_index, &gid) == 0) {
      std::memcpy(addr.gid.data(), gid.raw, 16);
    }
    d->address_ = EncodeVerbsAddress(addr);
    d->max_msg_ = port.max_msg_sz;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      // One bound for QPs and SRQs (DeviceLimits::max_qp_wr): the smaller.
      const int wr =
          attr.max_srq_wr > 0 ? std::min(attr.max_qp_wr, attr.max_srq_wr) : attr.max_qp_wr;
      d->max_qp_wr_ = wr > 0 ? static_cast<uint32_t>(wr) : 0;
      d->max_cqe_ = attr.max_cqe;
    }
  }
  ibv_free_device_list(list);
  if (d->ctx_ == nullptr) {
    return absl::NotFoundError(
        options.device_name.empty()
            ? absl::StrCat("no RDMA device among [", names, "] has port ", options.port,
                           " active; or run without RDMA on the soft transport")
            : absl::StrCat("RDMA device '", options.device_name, "' not found among [", names,
                           "]"));
  }
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  if (absl::Status st =
          CheckMemlock(lim.rlim_cur, lim.rlim_cur == RLIM_INFINITY, options.min_memlock_bytes);
      !st.ok()) {
    return st;
  }
  d->pd_ = ibv_alloc_pd(d->ctx_);
  if (d->pd_ == nullptr) return VerbError("ibv_alloc_pd", errno);
  // Asynchronous events (SRQ limits) are read without blocking, when asked for.
  fcntl(d->ctx_->async_fd, F_SETFL, fcntl(d->ctx_->async_fd, F_GETFL) | O_NONBLOCK);
  return d;
}

absl::StatusOr<std::unique_ptr<rnic::SharedReceiveQueue>> VerbsDevice::CreateSharedReceiveQueue(
    const rnic::SrqConfig& config) {
  if (absl::Status st = rnic::CheckSrqConfig(config, limits()); !st.ok()) return st;
  auto srq = std::make_unique<VerbsSharedReceiveQueue>(this, config.max_wr);
  if (absl::Status st = srq->Create(pd_, config); !st.ok()) return st;
  return std::unique_ptr<rnic::SharedReceiveQueue>(std::move(srq));
}

void VerbsDevice::DrainAsyncEvents() {
  std::lock_guard<std::mutex> l(async_mu_);
  ibv_async_event event;
  while (ibv_get_async_event(ctx_, &event) == 0) {
    if (event.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
      static_cast<std::atomic<bool>*>(event.element.srq->srq_context)->store(true);
    }
    ibv_ack_async_event(&event);
  }
}

VerbsDevice::~VerbsDevice() {
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

rnic::DeviceLimits VerbsDevice::limits() const {
  rnic::DeviceLimits l;
  l.max_message_bytes = max_msg_;
  if (max_qp_wr_ > 0) l.max_qp_wr = max_qp_wr_;
  if (max_cqe_ > 0) l.max_cqe = max_cqe_;
  return l;
}

absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> VerbsDevice::RegisterMemory(void* addr,
                                                                                size_t length,
                                                                                uint32_t access) {
  if (absl::Status st = rnic::CheckRegistration(addr, length, access); !st.ok()) return st;
  ibv_mr* mr = ibv_reg_mr(pd_, addr, length, MapAccess(access));
  if (mr == nullptr) return VerbError("ibv_reg_mr", errno);
  rnic::MemoryRegion::Description desc{
      addr, length, mr->lkey, mr->rkey, access & ~uint32_t{rnic::kHugePageBacked}, 4096};
  return std::unique_ptr<rnic::MemoryRegion>(new VerbsMemoryRegion(desc, mr));
}

absl::StatusOr<std::unique_ptr<rnic::MemoryWindow>> VerbsDevice::AllocateWindow() {
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  if (mw == nullptr) return VerbError("ibv_alloc_mw(IBV_MW_TYPE_2)", errno);
  return std::unique_ptr<rnic::MemoryWindow>(new VerbsMemoryWindow(mw));
}

absl::StatusOr<std::unique_ptr<rnic::CompletionQueue>> VerbsDevice::CreateCompletionQueue(
    int capacity) {
  if (capacity <= 0) {
    return absl::InvalidArgumentError("CreateCompletionQueue: capacity must be positive");
  }
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  if (ch == nullptr) return VerbError("ibv_create_comp_channel", errno);
  fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  ibv_cq* cq = ibv_create_cq(ctx_, capacity, nullptr, ch, 0);
  if (cq == nullptr) {
    int err = errno;
    ibv_destroy_comp_channel(ch);
    return VerbError("ibv_create_cq", err);
  }
  return std::unique_ptr<rnic::CompletionQueue>(new VerbsCompletionQueue(ch, cq));
}

absl::StatusOr<std::unique_ptr<rnic::QueuePair>> VerbsDevice::CreateQueuePair(
    const rnic::QpConfig& config) {
  auto objects =
      rnic::BackendQpObjects<VerbsCompletionQueue, VerbsSharedReceiveQueue>(config, "verbs");
  if (!objects.ok()) return objects.status();
  if (absl::Status st = rnic::CheckQpConfig(config, limits()); !st.ok()) return st;
  ibv_qp_init_attr init{};
  init.send_cq = objects->send_cq->cq();
  init.recv_cq = objects->recv_cq->cq();
  init.cap.max_send_wr = config.max_send_wr;
  init.cap.max_recv_wr = config.max_recv_wr;
  init.cap.max_send_sge = rnic::kMaxSge;
  init.cap.max_recv_sge = rnic::kMaxSge;
  init.qp_type = IBV_QPT_RC;
  if (objects->srq != nullptr) {
    init.srq = objects->srq->srq();
    init.cap.max_recv_wr = 0;
  }
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  if (qp == nullptr) return VerbError("ibv_create_qp", errno);
  return std::unique_ptr<rnic::QueuePair>(new VerbsQueuePair(
      qp, options_, address_, std::min(options_.mtu_bytes, active_mtu_bytes_), config, max_msg_));
}

}  // namespace unloadkv::verbs
