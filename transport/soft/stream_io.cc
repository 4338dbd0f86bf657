// Stream I/O of the soft RNIC: frames queued (and a failed QP's taken back) and flushed with
// sendmsg, bytes read and fed to the frame reader, which dispatches each frame to its QP.
// Runs with Nic::mu_ held.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/base/ring_queue.h"
#include "transport/rnic/request_checks.h"
#include "transport/soft/datapath_util.h"
#include "transport/soft/nic.h"

namespace unloadkv::soft {

Stream::Stream(Nic* n, int f, bool out)
    : nic(n), fd(f), outbound(out), hello_seen(out), reader(this, n->limits().max_message_bytes) {}

Stream::~Stream() {
  if (fd >= 0) close(fd);
}

PayloadPlan Stream::OnHeader(const FrameHeader& h) {
  current = nullptr;
  if (h.type == FrameType::kHello) {
    if (hello_seen) {
      nic->KillStream(this, rnic::WcStatus::kRetryExceeded, "a second HELLO");
      return Close();
    }
    hello_seen = true;
    return PlaceNothing();
  }
  if (!hello_seen) {
    nic->peer_log_.Log(LogLevel::kWarning,
                       "soft: inbound stream did not start with HELLO; closing it");
    return Close();
  }
  if (IsRequest(h.type)) return nic->OnRequestHeader(this, h);
  if (IsResponse(h.type)) return nic->OnResponseHeader(this, h);
  switch (h.type) {
    case FrameType::kConnect:
      return nic->OnConnect(this, h);
    case FrameType::kConnectAck:
      return nic->OnConnectAck(this, h);
    case FrameType::kDisconnect:
      return nic->OnDisconnect(this, h);
    default:
      return Close();
  }
}

void Stream::OnFrame(const FrameHeader& h) {
  QpCore* qp = current;
  current = nullptr;
  if (qp == nullptr) return;
  if (IsRequest(h.type)) {
    nic->OnRequestDone(qp, h);
  } else {
    nic->OnResponseDone(qp, h);
  }
}

void Nic::Enqueue(Stream* s, const FrameHeader& h, const char* payload, size_t payload_len,
                  bool copy_payload, QpCore* owner) {
  OutSegment& head = s->out.emplace_back();
  head.len = EncodeFrameHeader(h, head.inline_bytes);
  head.is_inline = true;
  head.owner = owner;
  head.frame_start = true;
  if (payload_len > 0) {
    OutSegment& body = s->out.emplace_back();
    if (copy_payload) {
      body.owned = std::make_unique<char[]>(payload_len);
      std::memcpy(body.owned.get(), payload, payload_len);
      body.ptr = body.owned.get();
    } else {
      body.ptr = payload;
    }
    body.len = payload_len;
    body.owner = owner;
  }
  if (!s->in_dirty) {
    s->in_dirty = true;
    dirty_.push_back(s);
  }
}

void Nic::EnqueueGather(Stream* s, const FrameHeader& h, const rnic::SendWorkRequest& wr,
                        QpCore* owner) {
  Enqueue(s, h, nullptr, 0, false, owner);
  if (wr.opcode == rnic::Opcode::kRead) return;
  for (int i = 0; i < wr.num_sge; ++i) {
    if (wr.sg_list[i].length == 0) continue;
    OutSegment& body = s->out.emplace_back();
    body.ptr = reinterpret_cast<const char*>(wr.sg_list[i].addr);
    body.len = wr.sg_list[i].length;
    body.owner = owner;
  }
}

void Nic::EnqueueControl(QpCore* qp, FrameType type, uint32_t psn, uint32_t aux) {
  FrameHeader h;
  h.type = type;
  h.psn = psn;
  h.aux = aux;
  h.qp = qp->peer_qp;
  h.src_qp = qp->qp_num;
  Enqueue(qp->stream, h, nullptr, 0, false);
}

void Nic::PurgeRequests(Stream* s, QpCore* qp) {
  if (s->out.empty()) return;
  // The frame at the front has started leaving if part of it went already.
  const bool front_started = s->out_front_offset > 0 || !s->out.front().frame_start;
  RingQueue<OutSegment> kept;
  bool in_front_frame = true;
  for (size_t i = 0; i < s->out.size(); ++i) {
    OutSegment& seg = s->out[i];
    if (i > 0 && seg.frame_start) in_front_frame = false;
    if (seg.owner != qp) {
      kept.push_back(std::move(seg));
      continue;
    }
    if (!(in_front_frame && front_started)) continue;  // never started: dropped
    if (!seg.is_inline && seg.owned == nullptr) {
      seg.owned = std::make_unique<char[]>(seg.len);
      std::memcpy(seg.owned.get(), seg.ptr, seg.len);
      seg.ptr = seg.owned.get();
    }
    seg.owner = nullptr;
    kept.push_back(std::move(seg));
  }
  s->out.swap(kept);
  if (!front_started) s->out_front_offset = 0;
}

void Nic::FlushStream(Stream* s) {
  if (s->dead) return;
  if (s->connecting) {
    // The dial may have completed since Progress last looked (loopback dials usually have):
    // check without waiting, so output need not wait for the next Progress.
    pollfd p{s->fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) == 1) FinishConnect(s);  // flushes once connected
    return;
  }
  while (!s->out.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (auto it = s->out.begin(); it != s->out.end() && n < kMaxIov; ++it, ++n) {
      size_t skip = n == 0 ? s->out_front_offset : 0;
      iov[n] = {const_cast<char*>(it->data()) + skip, it->len - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!s->want_write) {
          s->want_write = true;
          UpdateInterest(s);
        }
        return;
      }
      if (errno == EINTR) continue;
      if (s->draining) {
        FinishClose(s);
      } else {
        KillStream(s, rnic::WcStatus::kRetryExceeded,
                   absl::StrCat("send failed: ", std::strerror(errno)));
      }
      return;
    }
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      OutSegment& front = s->out.front();
      size_t avail = front.len - s->out_front_offset;
      if (left >= avail) {
        left -= avail;
        s->out.pop_front();
        s->out_front_offset = 0;
      } else {
        s->out_front_offset += left;
        left = 0;
      }
    }
  }
  if (s->draining) {
    // Everything is sent: our side ends here; the stream closes once the peer's does.
    shutdown(s->fd, SHUT_WR);
    s->lingering = true;
    s->want_write = false;
    UpdateInterest(s);
    return;
  }
  if (s->want_write) {
    s->want_write = false;
    UpdateInterest(s);
  }
}

void Nic::FlushDirty() {
  // FlushStream may kill streams and add to dirty_; iterate by index over a stable copy.
  // dirty_ takes the spare's storage; the list flushed becomes the next spare (no allocation
  // once both have grown).
  std::vector<Stream*> dirty = std::move(dirty_spare_);
  dirty.clear();
  dirty.swap(dirty_);
  for (Stream* s : dirty) {
    s->in_dirty = false;
    if (!s->dead) FlushStream(s);
  }
  dirty.clear();
  dirty_spare_ = std::move(dirty);
}

void Nic::UpdateInterest(Stream* s) {
  if (s->dead) return;
  epoll_event ev{};
  ev.events = (s->draining && !s->lingering ? 0 : EPOLLIN) | (s->want_write ? EPOLLOUT : 0);
  ev.data.ptr = s;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, s->fd, &ev);
}

void Nic::ReadStream(Stream* s) {
  size_t budget = kReadBudgetBytes;
  while (!s->dead && !s->draining && budget > 0) {
    absl::Span<char> direct = s->reader.DirectTarget();
    ssize_t got;
    if (s->rbeg == s->rend && direct.size() >= kDirectReadThreshold) {
      got = recv(s->fd, direct.data(), std::min(direct.size(), budget), MSG_DONTWAIT);
      if (got > 0) {
        s->reader.AdvanceDirect(static_cast<size_t>(got));
        budget -= std::min<size_t>(budget, got);
        continue;
      }
    } else {
      if (!PrepareReadBuffer(s)) return;
      const size_t room = s->rbuf->size() - s->rend;
      got = recv(s->fd, s->rbuf->data() + s->rend, room, MSG_DONTWAIT);
      if (got > 0) {
        budget -= std::min<size_t>(budget, got);
        if (!AbsorbBuffered(s, static_cast<size_t>(got), room)) break;
        continue;
      }
    }
    if (got == 0) {
      PeerClosed(s, "peer closed the connection");
      return;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == EINTR) continue;
    PeerClosed(s, absl::StrCat("receive failed: ", std::strerror(errno)));
    return;
  }
  AckTouched();
}

bool Nic::PrepareReadBuffer(Stream* s) {
  if (s->rbeg == s->rend) s->rbeg = s->rend = 0;
  if (s->rbuf != nullptr) return true;
  s->rbuf = std::make_unique<MappedMemory>(kReadBufferBytes, /*try_huge=*/false);
  if (s->rbuf->data() != nullptr) return true;
  s->rbuf.reset();
  KillStream(s, rnic::WcStatus::kRetryExceeded, "cannot map a read buffer");
  return false;
}

bool Nic::AbsorbBuffered(Stream* s, size_t got, size_t room) {
  s->rend += got;
  FeedBuffered(s);
  // A short read drained the socket; level-triggered epoll reports anything newer.
  return !s->dead && (got == room || s->reader.DirectTarget().size() >= kDirectReadThreshold);
}

void Nic::DropInput(Stream* s) {
  char scratch[16384];
  for (size_t budget = kReadBudgetBytes; budget > 0;) {
    ssize_t got = recv(s->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (got > 0) {
      budget -= std::min<size_t>(budget, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    FinishClose(s);  // the peer closed (or the connection broke): done
    return;
  }
}

void Nic::FeedBuffered(Stream* s) {
  size_t consumed = 0;
  absl::Status st = s->reader.Feed(s->rbuf->data() + s->rbeg, s->rend - s->rbeg, &consumed);
  s->rbeg += consumed;
  if (!st.ok()) {
    KillStream(s, rnic::WcStatus::kRetryExceeded, absl::StrCat("bad frame: ", st.message()));
    return;
  }
  if (s->rbeg == s->rend) s->rbeg = s->rend = 0;
}

}  // namespace unloadkv::soft
