// Test peer for soft_two_process_test: a separate process with one soft device in
// caller-driven progress mode. Protocol on stdin/stdout, one line each way:
//   peer prints:  "<qp attributes>|<rkey>|<buffer address>"
//   peer reads:   "<qp attributes of the test>"
// Then it answers SEND requests until told to stop:
//   "sum <offset> <length>" -> SEND back the FNV-1a hash of that part of its buffer, as text
//   "echo <text>"           -> SEND back "<text>"
//   "pause"                 -> SEND back "paused", then stop progressing the device for 60 s
//   "exit"                  -> exit 0
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "transport/base/logging.h"
#include "transport/rnic/wait.h"
#include "transport/soft/soft_device.h"

namespace {

uint64_t Fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  return h;
}

int Fail(absl::string_view what) {
  std::fprintf(stderr, "soft_peer: %.*s\n", static_cast<int>(what.size()), what.data());
  return 1;
}

}  // namespace

int main() {
  using namespace unloadkv;
  SetMinLogLevel(LogLevel::kError);
  constexpr size_t kBytes = 64 << 20;
  auto dev = soft::SoftDevice::Create({});
  if (!dev.ok()) return Fail(dev.status().ToString());
  std::string buffer(kBytes, '\0');
  auto mr = (*dev)->RegisterMemory(buffer.data(), kBytes,
                                   rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead);
  auto cq = (*dev)->CreateCompletionQueue(64);
  if (!mr.ok() || !cq.ok()) return Fail("setup failed");
  rnic::QpConfig cfg;
  cfg.send_cq = cq->get();
  cfg.recv_cq = cq->get();
  auto qp = (*dev)->CreateQueuePair(cfg);
  if (!qp.ok()) return Fail(qp.status().ToString());
  std::cout << rnic::EncodeQpAttributes((*qp)->local_attributes()) << "|" << (*mr)->rkey() << "|"
            << (*mr)->address() << std::endl;
  std::string line;
  if (!std::getline(std::cin, line)) return Fail("no attributes on stdin");
  auto remote = rnic::DecodeQpAttributes(line);
  if (!remote.ok()) return Fail(remote.status().ToString());
  if (auto st = (*qp)->Connect(*remote); !st.ok()) return Fail(st.ToString());

  // Receives live in the last 1 MiB of the buffer; replies are built just before it.
  constexpr size_t kRecvOff = kBytes - (1 << 20), kReplyOff = kRecvOff - 4096;
  for (;;) {
    if (!(*qp)->PostRecv(rnic::MakeRecv(1, (*mr)->Sge(kRecvOff, 4096))).ok()) return Fail("recv");
    auto wc = rnic::WaitForCompletion(**dev, **cq, absl::Seconds(60));
    if (!wc.ok() || wc->status != rnic::WcStatus::kSuccess) return Fail("receive failed");
    std::string msg(buffer.data() + kRecvOff, wc->byte_len);
    std::string reply;
    std::vector<std::string> parts = absl::StrSplit(msg, ' ');
    uint64_t off, len;
    if (msg == "exit") return 0;
    if (parts.size() == 3 && parts[0] == "sum" && absl::SimpleAtoi(parts[1], &off) &&
        absl::SimpleAtoi(parts[2], &len) && off + len <= kRecvOff) {
      reply = absl::StrCat(Fnv1a(buffer.data() + off, len));
    } else if (absl::StartsWith(msg, "echo ")) {
      reply = msg.substr(5);
    } else if (msg == "pause") {
      reply = "paused";
    } else {
      reply = "error: unknown request";
    }
    std::memcpy(buffer.data() + kReplyOff, reply.data(), reply.size());
    if (!(*qp)->PostSend(rnic::MakeSend(2, (*mr)->Sge(kReplyOff, reply.size()))).ok()) {
      return Fail("send");
    }
    // Caller-driven device: while this process sleeps, its NIC does nothing at all. Pause
    // right after posting (which writes the reply to the socket): waiting for the reply's
    // completion would keep the NIC running, and it could accept and acknowledge the first of
    // the writes the test posts as soon as it reads "paused".
    if (msg == "pause") {
      sleep(60);
      continue;
    }
    auto sent = rnic::WaitForCompletion(**dev, **cq, absl::Seconds(60));
    if (!sent.ok() || sent->status != rnic::WcStatus::kSuccess) return Fail("reply failed");
  }
}
