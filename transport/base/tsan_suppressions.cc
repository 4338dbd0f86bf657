// ThreadSanitizer suppressions for tests that run several RDMA "nodes" in one process, and for
// a library race in civetweb (below).
//
// A NIC (or an unload worker standing in for one) writes target memory, and another node's
// CPU reads it after a completion that travelled over the network: the soft RNIC's TCP socket
// or the engine's ack. That ordering is real but invisible to TSan, which only sees a write in
// one thread and a read in another without a lock between them. Only the placement copies are
// suppressed; every other access of these functions is still checked.
//
// The other way round, a NIC reads memory a CPU writes: the KV store copies an inline value
// (or a merge's result) into a freshly allocated slot under its lock, and that slot may have
// been freed at a commit that a joining backup's link did not vote on, while that link still
// has a write of the slot's previous value queued (docs/cluster.md, "Slots and joiners"). The
// soft RNIC's sendmsg may then read the slot as the copy fills it. The joiner gets torn bytes
// in a slot its records then free, and the new value's own write, queued behind on the same
// connection, overwrites them; granted values written into such a slot (by the client's NIC,
// ReadStream above) were already in this position. Only the store's two copies into a new
// slot are suppressed: CPU readers of the arena (GET, SCAN, snapshots) take the store's lock.
//
// Also linked into kvserver and kvclient: Debian's civetweb 1.15 (under prometheus-cpp's
// /metrics endpoint) calls gmtime() from its worker threads to format the Date header, and
// gmtime's static buffer is shared. With several workers (MetricsEndpoint::kThreads) two
// scrapes at once race there, inside the library; the worst outcome is a garbled Date header.
// We cannot fix Debian's library, so its frames are suppressed; our code is still checked.
extern "C" const char* __tsan_default_suppressions() {
  return "race:unloadkv::engine::*CopyStagedWrite\n"
         "race:unloadkv::soft::FrameReader::Feed\n"
         "race:unloadkv::soft::Nic::ReadStream\n"
         "race:unloadkv::server::KvStore::PrepareCopy\n"
         "race:unloadkv::server::KvStore::MergeLocked\n"
         "race:libcivetweb.so\n";
}
