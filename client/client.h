// unloadkv::Client, the C++ SDK: one connection to a kvserver, synchronous and asynchronous
// Get/Put/Delete/Scan.
//
//   unloadkv::ClientOptions o;
//   o.server = "127.0.0.1:7070";
//   auto client = unloadkv::Client::Connect(o);          // absl::StatusOr
//   absl::Status st = (*client)->Put("user:1", "alice");
//   absl::StatusOr<std::string> v = (*client)->Get("user:1");
//
// In a cluster (docs/cluster.md) set `etcd` and `cluster` instead of `server`: the client reads
// and watches the cluster map, sends each key to its shard's primary, and when a primary is
// gone, deposed or refuses ("not the primary": ABORTED) it refreshes the map and retries, with
// backoff, for at most `failover_timeout`. A PUT or DELETE whose outcome it cannot know (the
// primary failed after receiving it) is never retried: it fails with absl::StatusCode::kUnknown
// ("outcome unknown"). Scan walks the shards in key order.
//
// A Put writes the value straight into a server arena slot through the offload/unload write
// engine (the connection's path policy picks the path), then sends the PUT naming the slot;
// the server publishes it only then, so a value is never visible half-written.
//
// Errors: InvalidArgument (limits of proto/kv.proto), NotFound, ResourceExhausted (more than
// max_in_flight requests, except inline PUTs, which wait for room; or the server's arena is
// full), DeadlineExceeded, Unavailable
// (connection lost or server shutting down). Synchronous calls retry transient failures
// (local push-back; timeouts of reads) up to max_retries times with exponential backoff.
//
// The installed API is this header and what it includes (Abseil's, from libabsl-dev); link
// libunloadkv (pkg-config unloadkv, CMake unloadkv::client, Bazel //client:client). C++17.
//
// Thread-safety: all methods may be called from any thread. Async callbacks run exactly once,
// on the client's engine thread (on the caller's thread when the request fails before it is
// sent; on the process's deadline thread when it times out); they must not block, call
// synchronous methods or destroy the client.
#ifndef UNLOADKV_CLIENT_CLIENT_H_
#define UNLOADKV_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#define UNLOADKV_VERSION_MAJOR 1
#define UNLOADKV_VERSION_MINOR 0
#define UNLOADKV_VERSION_PATCH 0
#define UNLOADKV_VERSION "1.0.0"  // of these headers; unloadkv::Version() is the library's

// What libunloadkv exports; everything else in it is hidden (client/unloadkv.lds).
#define UNLOADKV_EXPORT __attribute__((visibility("default")))

namespace unloadkv {

// The SDK's version. Within one major version the installed library stays binary compatible:
// no public class or struct changes layout and no virtual function is added, removed or
// reordered (docs/sdk.md, "Versioning"); the shared library's SONAME carries the major.
UNLOADKV_EXPORT const char* Version();  // "MAJOR.MINOR.PATCH" of the library actually loaded

struct ClientOptions {
  std::string server = "127.0.0.1:7070";  // kvserver's --listen address (single node)
  // A cluster: etcd endpoints "HOST:PORT[,HOST:PORT...]" and the cluster's name; `server` is
  // then unused.
  std::string etcd;
  std::string cluster;
  // Authentication (docs/security.md): a file of "NAME ROLE SECRET" lines (kvserver's
  // --auth_file format, mode 600) and the user of it to prove ("" : the file's only user).
  // Connecting fails with Unauthenticated ("server refused: authentication failed ...") when
  // the server does not know the user or secret or wants credentials that were not given, and
  // when the server cannot prove it holds the secret too (a cluster client connects to a node
  // at its first request there). Empty: no authentication.
  std::string auth_file;
  std::string user;
  // etcd in a cluster (kvserver's --etcd_* flags): TLS with the CA that signed etcd's
  // certificate, a client certificate and key, an etcd user with a password file.
  std::string etcd_ca;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_user;
  std::string etcd_password_file;
  // Cluster: how long an operation keeps retrying through a failover before it fails.
  absl::Duration failover_timeout = absl::Seconds(10);
  std::string transport = "soft";       // soft | verbs; must match the server
  std::string soft_host = "127.0.0.1";  // soft: the address the server reaches this client on
  std::string verbs_device;
  // Path policy of value writes: offload, unload, adaptive, split:F, unload_after:N; with
  // ",inline:N" (N at most 4096) a Put of at most N bytes carries its value in the PUT message
  // instead, no grant and no value write (docs/kv.md, "Inline PUTs"). Without it, adaptive on
  // the soft transport inlines values of up to 4096 bytes (there the value write costs more
  // than the copy); ",inline:0" keeps every value on the engine.
  std::string policy = "adaptive";
  int max_in_flight = 64;                     // requests outstanding on the connection (1..1024)
  absl::Duration timeout = absl::Seconds(5);  // per request, and for Connect as a whole
  int max_retries = 3;
  // Who drives the connection. false: an engine thread, so async callbacks run whenever
  // answers arrive. true: the threads blocked in synchronous calls (or in Wait) drive it
  // themselves, one at a time, which saves waking a second thread per request; async
  // callbacks then run only while some thread is inside a synchronous call or Wait. On the
  // soft transport the waiting thread then sleeps in recv on the connection's stream, as a
  // blocking client does (SoftDevice::Options::wait_in_read).
  bool caller_progress = false;
};

struct ScanPage {
  std::vector<std::pair<std::string, std::string>> items;
  bool more = false;  // call again from the last key + "\0" for the rest
};

// A server's figures (kvserver's, or summed over a cluster's nodes by the cluster client).
struct ServerStats {
  uint64_t keys = 0;
  uint64_t arena_bytes = 0;       // the registered arenas
  uint64_t arena_used_bytes = 0;  // slot capacity held by live values and outstanding grants
  uint64_t connections = 0;
  uint64_t offload_writes = 0;  // value writes that reached the arenas, by path
  uint64_t unload_writes = 0;
  std::string staging_memory;  // how staging rings are backed
  std::string transport;       // soft | verbs
  // Durability (docs/durability.md): the --fsync policy ("" without --data_dir: in memory
  // only), records the shard logs acknowledged and their fsyncs, and why a log refuses writes
  // ("" while every log takes them; in a cluster prefixed by the node's name).
  std::string fsync;
  uint64_t log_records = 0;
  uint64_t log_syncs = 0;
  std::string log_failure;
};

// Field records: a value made of named fields (a YCSB record), which MergeFields updates in
// place. The encoding, for each field in order: u32 name length, name, u32 value length,
// value (lengths little-endian); names are unique. EncodeFields gives it for `fields` (a
// later duplicate name replaces the earlier one's value); DecodeFields reads one back, and
// fails InvalidArgument naming what is wrong for bytes that are not a field record.
using Fields = std::vector<std::pair<std::string, std::string>>;
UNLOADKV_EXPORT std::string EncodeFields(const Fields& fields);
UNLOADKV_EXPORT absl::StatusOr<Fields> DecodeFields(absl::string_view record);

// Value writes this client made, by the path they took (complete, from engine callbacks).
struct WriteStats {
  uint64_t offload = 0;
  uint64_t unload = 0;
  uint64_t errors = 0;
};

// The SDK's interface, implemented by a connection to one kvserver and by a router over a
// cluster's primaries (client_impl.h, cluster_router.h; private to client/). Connect picks.
class UNLOADKV_EXPORT Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  virtual ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  virtual absl::Status Put(absl::string_view key, absl::string_view value) = 0;
  // Merges `fields`, a field record (EncodeFields), into the record stored at `key`:
  // each named field takes its new value, the others stay; with nothing stored, `fields`
  // becomes the record. One round trip; the update travels through the write engine like a
  // Put's value and the server builds the merged record. FailedPrecondition when the stored
  // value is not a field record, InvalidArgument when `fields` is not one.
  virtual absl::Status MergeFields(absl::string_view key, absl::string_view fields) = 0;
  virtual absl::StatusOr<std::string> Get(absl::string_view key) = 0;
  virtual absl::Status Delete(absl::string_view key) = 0;
  virtual absl::StatusOr<ScanPage> Scan(absl::string_view start, absl::string_view end,
                                        uint32_t limit) = 0;
  virtual absl::StatusOr<ServerStats> Stats() = 0;

  // Asynchronous forms; no retries. Put yields the new version.
  virtual void PutAsync(absl::string_view key, absl::string_view value,
                        std::function<void(absl::StatusOr<uint64_t>)> done) = 0;
  virtual void MergeFieldsAsync(absl::string_view key, absl::string_view fields,
                                std::function<void(absl::StatusOr<uint64_t>)> done) = 0;
  virtual void GetAsync(absl::string_view key,
                        std::function<void(absl::StatusOr<std::string>)> done) = 0;
  virtual void DeleteAsync(absl::string_view key, std::function<void(absl::Status)> done) = 0;

  // While a Batch lives, the requests issued on the connection (by any thread) are posted
  // together when it ends (one doorbell: on the soft transport one sendmsg instead of one per
  // request), as hiredis does with pipelined commands. Never wait for this client's requests
  // inside a batch: none of them is on the wire until it ends. A no-op in a cluster. Must not
  // outlive the Client.
  class UNLOADKV_EXPORT Batch {
   public:
    // What an implementation holds while a batch is open (opaque; null: nothing).
    struct State {
      virtual ~State() = default;
    };
    explicit Batch(std::unique_ptr<State> state = nullptr);
    ~Batch();
    Batch(Batch&&) noexcept;
    Batch& operator=(Batch&&) = delete;

   private:
    std::unique_ptr<State> state_;
  };
  virtual Batch BeginBatch() = 0;

  // Returns once `done()` is true, driving the connection meanwhile when caller_progress is
  // set (else waiting for the engine thread). `done` is called with no lock held, from this
  // thread only. For waiting on async requests; never call it from a callback.
  virtual void Wait(const std::function<bool()>& done) = 0;

  virtual int in_flight() const = 0;
  virtual bool connected() const = 0;
  virtual WriteStats write_stats() const = 0;
  // How the connection's staging ring is backed ("2 MiB huge pages", or 4 KiB pages and why).
  virtual const std::string& staging_memory() const = 0;

 protected:
  Client() = default;
};

}  // namespace unloadkv

#endif  // UNLOADKV_CLIENT_CLIENT_H_
