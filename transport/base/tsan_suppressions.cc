// ThreadSanitizer suppressions for tests that run several RDMA "nodes" in one process, and for
// a library race in civetweb (below).
//
// A NIC (or an unload worker standing in for one) writes target memory, and another node's
// CPU reads it after a completion that travelled over the network: the soft RNIC's TCP socket
// or the engine's ack. That ordering is real but invisible to TSan, which only sees a write in
// one thread and a read in another without a lock between them. Only the placement copies are
// suppressed; every other access of these functions is still checked.
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
         "race:libcivetweb.so\n";
}
