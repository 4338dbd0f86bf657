// The engine: devices' memory registered for validation, workers, and driving them.
#include "transport/engine/engine.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/logging.h"
#include "transport/engine/engine_internal.h"
#include "transport/rnic/wait.h"

namespace unloadkv::engine {

Engine::Engine(rnic::Device* device, const EngineOptions& options)
    : device_(device),
      options_(options),
      table_(std::make_shared<ValidationTable>()),
      target_models_(&device->clock()) {}

namespace {

// The options Create accepts; InvalidArgument naming the first out of range.
absl::Status CheckOptions(const EngineOptions& options, rnic::Device& device) {
  if (options.unload_workers < 1 || options.unload_workers > kMaxUnloadWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine: unload_workers must be in 1..", kMaxUnloadWorkers));
  }
  const int ports = device.port_count();
  if (ports > 1 && ports < options.unload_workers && options.unload_workers % ports != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine: unload_workers (", options.unload_workers,
                     ") must be a multiple of the device's ", ports, " ports, or at most as many"));
  }
  if (options.staging_lanes < 1 || options.staging_lanes > kMaxLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine: staging_lanes must be in 1..", kMaxLanes));
  }
  if (options.staging_slots < 1 || options.staging_slots > kMaxStagingSlots ||
      options.staging_slot_bytes < 64 || options.staging_slot_bytes > (64u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("Engine: staging_slots must be in 1..",
                                                   kMaxStagingSlots,
                                                   " and staging_slot_bytes in 64..64 MiB"));
  }
  if (options.message_slots < 1 || options.message_slots > kMaxMessageSlots ||
      options.max_message_bytes < 64 || options.max_message_bytes > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("Engine: message_slots must be in 1..",
                                                   kMaxMessageSlots,
                                                   " and max_message_bytes in 64..1 MiB"));
  }
  if (options.min_staging_credits < 1 || options.min_staging_credits > options.staging_slots) {
    return absl::InvalidArgumentError(absl::StrCat("Engine: min_staging_credits must be in 1..",
                                                   "staging_slots (", options.staging_slots, ")"));
  }
  if (options.min_message_credits < 1 || options.min_message_credits > options.message_slots) {
    return absl::InvalidArgumentError(absl::StrCat("Engine: min_message_credits must be in 1..",
                                                   "message_slots (", options.message_slots, ")"));
  }
  if (options.max_connections_per_worker < 1 || options.max_connections_per_worker > 65536) {
    return absl::InvalidArgumentError("Engine: max_connections_per_worker must be in 1..65536");
  }
  const uint64_t cq_entries = ConnectionCqEntries(options) * options.max_connections_per_worker;
  if (cq_entries > static_cast<uint64_t>(device.limits().max_cqe)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Engine: a worker CQ for ", options.max_connections_per_worker,
                     " connections would need ", cq_entries, " entries, over the device's ",
                     device.limits().max_cqe, "; serve fewer per worker"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(rnic::Device* device,
                                                       const EngineOptions& options) {
  if (device == nullptr) return absl::InvalidArgumentError("Engine: no device");
  if (absl::Status st = CheckOptions(options, *device); !st.ok()) return st;
  std::unique_ptr<Engine> e(new Engine(device, options));
  e->ports_ = std::max(1, std::min(device->port_count(), options.unload_workers));
  const uint64_t cq_entries = ConnectionCqEntries(options) * options.max_connections_per_worker;
  for (int i = 0; i < options.unload_workers; ++i) {
    if (absl::Status st = e->AddWorker(i, cq_entries); !st.ok()) return st;
  }
  MappedMemory probe(size_t{2} << 20, options.huge_pages);
  e->staging_memory_ = !probe.huge() && options.huge_pages && options.modeled_huge_pages
                           ? "2 MiB huge pages (modeled node)"
                           : DescribePages(probe, options.huge_pages);
  return e;
}

absl::Status Engine::AddWorker(int index, uint64_t cq_entries) {
  const EngineOptions& options = options_;
  auto w = std::make_unique<Worker>();
  w->index = index;
  w->device = device_->port(index % ports_);
  w->clock = &device_->clock();
  // The pool first: its bound on connections is the tighter one, and the CQ is the larger.
  ReceivePool::Options po;
  po.buffer_bytes = MessageBufferBytes(options);
  po.connections = options.max_connections_per_worker;
  po.reserve = options.min_message_credits;
  po.shared = options.shared_message_buffers;
  po.wr_id_base = MakeWrId(WrKind::kPoolRecv, 0, 0);
  absl::StatusOr<std::unique_ptr<ReceivePool>> pool = ReceivePool::Create(*w->device, po);
  if (!pool.ok()) return pool.status();
  w->pool = std::move(*pool);
  SendSlotPool::Options so;
  so.slot_bytes = po.buffer_bytes;
  so.connections = options.max_connections_per_worker;
  so.reserve = SendReserve(options);
  so.shared = options.shared_message_buffers;
  absl::StatusOr<std::unique_ptr<SendSlotPool>> send_pool = SendSlotPool::Create(*w->device, so);
  if (!send_pool.ok()) return send_pool.status();
  w->send_pool = std::move(*send_pool);
  ReceivePool::Options st;
  st.name = "staging pool";
  st.buffer_bytes = options.staging_slot_bytes;
  st.connections = options.max_connections_per_worker * uint32_t(options.staging_lanes);
  st.reserve = options.min_staging_credits + 1;  // and one unsolicited ack
  st.shared = options.shared_staging_buffers;
  st.wr_id_base = MakeWrId(WrKind::kStagePoolRecv, 0, 0);
  st.huge_pages = options.huge_pages;
  st.modeled_huge_pages = options.modeled_huge_pages;
  absl::StatusOr<std::unique_ptr<ReceivePool>> stage_pool = ReceivePool::Create(*w->device, st);
  if (!stage_pool.ok()) return stage_pool.status();
  w->stage_pool = std::move(*stage_pool);
  absl::StatusOr<std::unique_ptr<rnic::CompletionQueue>> cq =
      w->device->CreateCompletionQueue(static_cast<int>(cq_entries));
  if (!cq.ok()) return cq.status();
  w->cq = std::move(*cq);
  workers_.push_back(std::move(w));
  return absl::OkStatus();
}

Engine::~Engine() { Stop(); }

uint64_t Engine::MaxConnectionBytes(const EngineOptions& o) {
  const uint64_t lanes = static_cast<uint64_t>(o.staging_lanes);
  const uint64_t stride = MessageBufferBytes(o);
  return lanes * (o.min_staging_credits + 1) * o.staging_slot_bytes +  // reserved staging
         lanes * kMaxStagingSlots * kStagingHeaderSize +  // headers for the peer's window
         (uint64_t{SendReserve(o)} + o.min_message_credits) * stride +  // reserved slots
         lanes * kAckSlots * kAckBytes;
}

uint64_t Engine::SharedBufferBytes(const EngineOptions& o) {
  const uint64_t stride = MessageBufferBytes(o);
  return (uint64_t{2} * o.shared_message_buffers * stride +
          uint64_t{o.shared_staging_buffers} * o.staging_slot_bytes) *
         static_cast<uint64_t>(o.unload_workers);
}

uint32_t Engine::MaxConnectionsPerWorker(const EngineOptions& o, const rnic::DeviceLimits& limits) {
  const uint64_t lanes = static_cast<uint64_t>(o.staging_lanes);
  if (o.min_message_credits == 0 || limits.max_qp_wr <= o.shared_message_buffers ||
      limits.max_qp_wr <= o.shared_staging_buffers) {
    return 0;
  }
  const uint64_t by_srq = std::min<uint64_t>(
      (limits.max_qp_wr - o.shared_message_buffers) / o.min_message_credits,
      (limits.max_qp_wr - o.shared_staging_buffers) / (lanes * (o.min_staging_credits + 1)));
  const uint64_t by_cq = static_cast<uint64_t>(limits.max_cqe) / ConnectionCqEntries(o);
  return static_cast<uint32_t>(std::min<uint64_t>({65536, by_srq, by_cq}));
}

namespace {
class EngineMemoryRegion : public rnic::MemoryRegion {
 public:
  EngineMemoryRegion(std::unique_ptr<rnic::MemoryRegion> inner,
                     std::shared_ptr<ValidationTable> table)
      : MemoryRegion(Description{inner->addr(), inner->length(), inner->lkey(), inner->rkey(),
                                 inner->access(), inner->page_size()}),
        inner_(std::move(inner)),
        table_(std::move(table)) {}
  ~EngineMemoryRegion() override {
    MutexLock l(&table_->mu);
    table_->regions.Erase(rkey());
  }

 private:
  std::unique_ptr<rnic::MemoryRegion> inner_;
  std::shared_ptr<ValidationTable> table_;
};
}  // namespace

absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> Engine::RegisterMemory(void* addr,
                                                                           size_t length,
                                                                           uint32_t access) {
  absl::StatusOr<std::unique_ptr<rnic::MemoryRegion>> mr =
      device_->RegisterMemory(addr, length, access);
  if (!mr.ok()) return mr.status();
  {
    MutexLock l(&table_->mu);
    table_->regions.Insert((*mr)->rkey(), {(*mr)->address(), (*mr)->length(), (*mr)->access()});
  }
  return std::unique_ptr<rnic::MemoryRegion>(new EngineMemoryRegion(std::move(*mr), table_));
}

Engine::PooledBuffers Engine::pooled_buffers() const {
  PooledBuffers b;
  for (const std::unique_ptr<Worker>& w : workers_) {
    const ReceivePool::Usage u = w->pool->usage();
    b.connections += u.admitted;
    b.lent += u.lent;
    b.touched += u.touched;
    b.registered += u.registered;
    b.capacity += w->pool->capacity();
    b.send_slots_lent += w->send_pool->lent();
    b.send_slots_touched += w->send_pool->touched();
    b.send_slots_registered += w->send_pool->registered();
    b.send_slots_capacity += w->send_pool->capacity();
    const ReceivePool::Usage st = w->stage_pool->usage();
    b.staging_lanes += st.admitted;
    b.staging_lent += st.lent;
    b.staging_touched += st.touched;
    b.staging_registered += st.registered;
    b.staging_capacity += w->stage_pool->capacity();
  }
  return b;
}

int Engine::PollOnce() {
  int n = 0;
  for (auto& w : workers_) n += w->PollOnce(*table_, options_.metrics);
  // After the answers of the batch were posted, which carry them.
  for (int p = 0; p < ports_; ++p) device_->port(p)->FlushDeferred();
  return n;
}

void Engine::Start() {
  if (!threads_.empty()) return;
  stop_.store(false);
  // An idle worker sleeps until there is work. One worker alone on a device that can be
  // interrupted waits in Progress until an event (a frame, a completion posted by another
  // thread, Stop's Interrupt) ends the wait; kIdleWait only bounds a wake-up the device would
  // miss. A worker alone on its port (a port per worker) is in that position. Several workers
  // on one port share its Progress, one waiting at a time, and the completions it delivers to
  // the others' queues wake nobody: they wait 1 ms at most.
  const bool alone = static_cast<int>(workers_.size()) == ports_;
  for (auto& w : workers_) {
    const absl::Duration idle_wait =
        alone && w->device->interruptible() ? kIdleWait : absl::Milliseconds(1);
    threads_.emplace_back([this, worker = w.get(), idle_wait] {
      auto poll = [&] {
        const int n = worker->PollOnce(*table_, options_.metrics);
        worker->device->FlushDeferred();  // after the answers of the batch were posted
        return n > 0;
      };
      while (!stop_.load(std::memory_order_acquire)) {
        if (poll()) continue;
        rnic::WaitForWork(*worker->device, *worker->cq, idle_wait, poll);
      }
    });
  }
}

int Engine::Drive(absl::Duration max_wait) {
  int n = PollOnce();
  if (n > 0) return n;
  // A caller-driven engine has one worker worth waiting on (the SDK's has exactly one).
  rnic::WaitForWork(*workers_.front()->device, *workers_.front()->cq, max_wait, [&] {
    n = PollOnce();
    return n > 0;
  });
  return n > 0 ? n : PollOnce();
}

void Engine::Stop() {
  stop_.store(true, std::memory_order_release);
  if (!threads_.empty()) {
    for (int p = 0; p < ports_; ++p) device_->port(p)->Interrupt();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace unloadkv::engine
