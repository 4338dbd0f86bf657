// The Python module `unloadkv` (pybind11): unloadkv::Client for scripts (docs/sdk.md, "Python").
//
//   import unloadkv
//   with unloadkv.Client(server="127.0.0.1:7070") as c:
//       c.put(b"user:1", b"alice")
//       c.get(b"user:1")                      # b"alice"; unloadkv.NotFound when absent
//       for key, value in c.scan(b"user:", b"user;"):
//           ...
//       c.put_async(b"k", b"v").result()      # a concurrent.futures.Future
//
// Threading: every blocking call releases the GIL while it waits. Async calls complete on the
// SDK's engine thread, which must not block, so it only queues the outcome; one resolver
// thread per Client takes the GIL and settles the futures. A Client may be shared by threads.
// Ownership: the Python objects (futures) are touched with the GIL held only.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "transport/base/logging.h"

namespace py = pybind11;

namespace unloadkv {
namespace python {
namespace {

// The module's exception classes, by absl status code (set once at import, GIL held).
struct Errors {
  PyObject* base = nullptr;  // unloadkv.Error
  std::unordered_map<int, PyObject*> by_code;
};
Errors& ErrorClasses() {
  static Errors* errors = new Errors();  // lives as long as the interpreter's module
  return *errors;
}

PyObject* ErrorFor(absl::StatusCode code) {
  const Errors& e = ErrorClasses();
  auto it = e.by_code.find(static_cast<int>(code));
  return it == e.by_code.end() ? e.base : it->second;
}

// Raises the exception class of `status` (GIL held).
[[noreturn]] void Raise(const absl::Status& status) {
  PyErr_SetString(ErrorFor(status.code()), std::string(status.message()).c_str());
  throw py::error_already_set();
}

// An exception object for a Future (GIL held).
py::object ExceptionObject(const absl::Status& status) {
  py::object cls = py::reinterpret_borrow<py::object>(ErrorFor(status.code()));
  return cls(std::string(status.message()));
}

// Fields from a dict (or any mapping) or an iterable of (name, value) pairs of bytes or str
// (GIL held); TypeError for anything else.
Fields ToFields(py::handle obj) {
  py::object pairs =
      py::hasattr(obj, "items") ? obj.attr("items")() : py::reinterpret_borrow<py::object>(obj);
  Fields fields;
  for (py::handle pair : pairs) {
    py::tuple t = py::reinterpret_borrow<py::object>(pair).cast<py::tuple>();
    if (t.size() != 2) throw py::type_error("a field is a (name, value) pair");
    fields.emplace_back(t[0].cast<std::string>(), t[1].cast<std::string>());
  }
  return fields;
}

// The outcome of an async call, as the engine thread hands it over.
struct Outcome {
  uint64_t id = 0;
  absl::Status status;
  std::optional<std::string> value;  // GET: the value; PUT: unset (version in `version`)
  std::optional<uint64_t> version;
};

class PyClient {
 public:
  explicit PyClient(const ClientOptions& options) : max_in_flight_(options.max_in_flight) {
    absl::StatusOr<std::unique_ptr<Client>> c;
    {
      py::gil_scoped_release release;
      c = Client::Connect(options);
    }
    if (!c.ok()) Raise(c.status());
    client_ = std::move(*c);
    resolver_ = std::thread([this] { Resolve(); });
  }

  ~PyClient() {
    py::gil_scoped_release release;
    Shut();
  }

  void Close() {
    py::gil_scoped_release release;
    Shut();
  }

  void Put(const std::string& key, const std::string& value) {
    Check(Unlocked([&](Client* c) { return c->Put(key, value); }));
  }

  py::bytes Get(const std::string& key) {
    absl::StatusOr<std::string> v = Unlocked([&](Client* c) { return c->Get(key); });
    Check(v.status());
    return py::bytes(*v);
  }

  void MergeFields(const std::string& key, py::handle fields) {
    const std::string record = EncodeFields(ToFields(fields));
    Check(Unlocked([&](Client* c) { return c->MergeFields(key, record); }));
  }

  void Delete(const std::string& key) {
    Check(Unlocked([&](Client* c) { return c->Delete(key); }));
  }

  // One page: ([(key, value), ...], more).
  py::tuple ScanPage(const std::string& start, const std::string& end, uint32_t limit) {
    absl::StatusOr<unloadkv::ScanPage> page =
        Unlocked([&](Client* c) { return c->Scan(start, end, limit); });
    Check(page.status());
    py::list items;
    for (const auto& [k, v] : page->items) items.append(py::make_tuple(py::bytes(k), py::bytes(v)));
    return py::make_tuple(items, page->more);
  }

  py::dict Stats() {
    absl::StatusOr<ServerStats> s = Unlocked([](Client* c) { return c->Stats(); });
    Check(s.status());
    py::dict d;
    d["keys"] = s->keys;
    d["arena_bytes"] = s->arena_bytes;
    d["arena_used_bytes"] = s->arena_used_bytes;
    d["connections"] = s->connections;
    d["offload_writes"] = s->offload_writes;
    d["unload_writes"] = s->unload_writes;
    d["staging_memory"] = s->staging_memory;
    d["transport"] = s->transport;
    d["fsync"] = s->fsync;
    d["log_records"] = s->log_records;
    d["log_syncs"] = s->log_syncs;
    d["log_failure"] = s->log_failure;
    return d;
  }

  py::object PutAsync(const std::string& key, const std::string& value) {
    return StartAsync([&](Client* c, uint64_t id) {
      c->PutAsync(key, value, [this, id](absl::StatusOr<uint64_t> r) {
        Outcome o{id, r.status()};
        if (r.ok()) o.version = *r;
        Deliver(std::move(o));
      });
    });
  }

  py::object GetAsync(const std::string& key) {
    return StartAsync([&](Client* c, uint64_t id) {
      c->GetAsync(key, [this, id](absl::StatusOr<std::string> r) {
        Outcome o{id, r.status()};
        if (r.ok()) o.value = std::move(*r);
        Deliver(std::move(o));
      });
    });
  }

  py::object DeleteAsync(const std::string& key) {
    return StartAsync([&](Client* c, uint64_t id) {
      c->DeleteAsync(key, [this, id](absl::Status st) { Deliver(Outcome{id, std::move(st)}); });
    });
  }
  bool closed() const { return client_ == nullptr; }

 private:
  // The client, or ValueError once closed (GIL held). Closing while another thread is inside
  // a call on the same client is the caller's error, as for a file.
  Client* Open() {
    if (client_ == nullptr) throw py::value_error("the unloadkv.Client is closed");
    return client_.get();
  }

  // Runs `call(client)` with the GIL released and returns what it returns (a Status or
  // StatusOr: no Python object crosses). ValueError when closed.
  template <typename Call>
  auto Unlocked(Call call) -> decltype(call(static_cast<Client*>(nullptr))) {
    Client* c = Open();
    py::gil_scoped_release release;
    return call(c);
  }

  static void Check(const absl::Status& status) {
    if (!status.ok()) Raise(status);
  }

  // Starts one async call: a Future registered under a new id, then `issue(client, id)` with
  // the GIL released once a slot is free; the call's callback must Deliver that id's outcome.
  template <typename Issue>
  py::object StartAsync(Issue issue) {
    Client* c = Open();
    uint64_t id = 0;
    py::object future = NewFuture(&id);  // not touched while the GIL is released
    {
      py::gil_scoped_release release;
      AwaitSlot();
      issue(c, id);
    }
    return future;
  }

  // Back-pressure for async calls (GIL released): waits while half of max_in_flight async
  // calls are unanswered (a PUT may need a grant request beside its own), so a loop of
  // put_async slows down instead of failing ResourceExhausted.
  void AwaitSlot() {
    std::unique_lock<std::mutex> l(mu_);
    slot_cv_.wait(l, [this] { return outstanding_ < std::max(1, max_in_flight_ / 2); });
    ++outstanding_;
  }

  // A new pending Future, registered under *id (GIL held).
  py::object NewFuture(uint64_t* id) {
    py::object f = py::module_::import("concurrent.futures").attr("Future")();
    *id = next_id_++;
    pending_.emplace(*id, f);
    return f;
  }

  // Engine thread: hands an outcome to the resolver; never blocks on Python.
  void Deliver(Outcome o) {
    std::lock_guard<std::mutex> l(mu_);
    outcomes_.push_back(std::move(o));
    --outstanding_;
    cv_.notify_one();
    slot_cv_.notify_one();
  }

  // Resolver thread: settles futures, GIL taken once per batch of outcomes.
  void Resolve() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [this] { return stop_ || !outcomes_.empty(); });
      if (outcomes_.empty()) return;  // stop_, and everything delivered is settled
      std::deque<Outcome> batch;
      batch.swap(outcomes_);
      l.unlock();
      {
        py::gil_scoped_acquire gil;
        for (Outcome& o : batch) Settle(o);
      }
      l.lock();
    }
  }

  void Settle(Outcome& o) {  // GIL held
    auto it = pending_.find(o.id);
    if (it == pending_.end()) return;
    py::object f = std::move(it->second);
    pending_.erase(it);
    try {
      if (!o.status.ok()) {
        f.attr("set_exception")(ExceptionObject(o.status));
      } else if (o.value.has_value()) {
        f.attr("set_result")(py::bytes(*o.value));
      } else if (o.version.has_value()) {
        f.attr("set_result")(*o.version);
      } else {
        f.attr("set_result")(py::none());
      }
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("unloadkv: settling a future");
    }
  }

  // Waits for every async call, stops the resolver, closes the connection (GIL released).
  void Shut() {
    if (client_ == nullptr) return;
    client_->Wait([this] { return client_->in_flight() == 0; });
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_one();
    }
    resolver_.join();
    client_.reset();
    py::gil_scoped_acquire gil;
    pending_.clear();  // none left: every call was answered or failed before this
  }

  const int max_in_flight_;
  std::unique_ptr<Client> client_;
  std::unordered_map<uint64_t, py::object> pending_;  // GIL held
  uint64_t next_id_ = 1;                              // GIL held

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable slot_cv_;
  std::deque<Outcome> outcomes_;  // guarded by mu_
  int outstanding_ = 0;           // async calls issued, not yet delivered; guarded by mu_
  bool stop_ = false;             // guarded by mu_
  std::thread resolver_;
};

// Iterates a range page by page (Client.scan).
class ScanIterator {
 public:
  ScanIterator(PyClient* client, std::string start, std::string end, uint32_t page_size)
      : client_(client), next_(std::move(start)), end_(std::move(end)), page_size_(page_size) {}

  py::tuple Next() {
    while (index_ >= items_.size()) {
      if (!more_) throw py::stop_iteration();
      py::tuple page = client_->ScanPage(next_, end_, page_size_);
      items_ = page[0].cast<py::list>();
      more_ = page[1].cast<bool>();
      index_ = 0;
      if (items_.size() > 0) {
        next_ = items_[items_.size() - 1].cast<py::tuple>()[0].cast<std::string>();
        next_.push_back('\0');
      } else {
        more_ = false;
      }
    }
    return items_[index_++].cast<py::tuple>();
  }

 private:
  PyClient* client_;  // kept alive by the iterator (py::keep_alive)
  std::string next_;
  std::string end_;
  uint32_t page_size_;
  py::list items_;
  size_t index_ = 0;
  bool more_ = true;
};

ClientOptions MakeOptions(const std::string& server, const std::string& etcd,
                          const std::string& cluster, const std::string& auth_file,
                          const std::string& user, double timeout, const std::string& transport,
                          const std::string& policy, int max_in_flight) {
  ClientOptions o;
  if (!server.empty()) o.server = server;
  o.etcd = etcd;
  o.cluster = cluster;
  o.auth_file = auth_file;
  o.user = user;
  if (!(timeout > 0)) throw py::value_error("timeout must be a positive number of seconds");
  o.timeout = absl::Seconds(timeout);
  o.transport = transport;
  o.policy = policy;
  o.max_in_flight = max_in_flight;
  return o;
}

void DefineErrors(py::module_& m) {
  Errors& e = ErrorClasses();
  e.base = PyErr_NewExceptionWithDoc("unloadkv.Error",
                                     "Base class of every error the unloadkv server or SDK "
                                     "reports; the message says why.",
                                     PyExc_Exception, nullptr);
  m.add_object("Error", py::handle(e.base));
  struct Kind {
    absl::StatusCode code;
    const char* name;
    PyObject* also;  // a built-in class it also derives from, or null
    const char* doc;
  };
  const Kind kinds[] = {
      {absl::StatusCode::kNotFound, "NotFound", PyExc_KeyError, "The key is not stored."},
      {absl::StatusCode::kInvalidArgument, "InvalidArgument", PyExc_ValueError,
       "A key, value or option outside the limits (docs/kv.md)."},
      {absl::StatusCode::kDeadlineExceeded, "DeadlineExceeded", PyExc_TimeoutError,
       "No answer within the timeout."},
      {absl::StatusCode::kUnavailable, "Unavailable", PyExc_ConnectionError,
       "The server is unreachable, the connection was lost or the server is stopping."},
      {absl::StatusCode::kResourceExhausted, "ResourceExhausted", nullptr,
       "Too many requests in flight, or the server's arena is full."},
      {absl::StatusCode::kFailedPrecondition, "FailedPrecondition", nullptr,
       "The request does not fit the stored state (e.g. merging into a value that is not a "
       "field record)."},
      {absl::StatusCode::kAborted, "Aborted", nullptr,
       "The node is not the key's primary (a cluster client retries these itself)."},
      {absl::StatusCode::kUnknown, "OutcomeUnknown", nullptr,
       "A write whose outcome cannot be known (the primary failed after receiving it)."},
      {absl::StatusCode::kUnauthenticated, "Unauthenticated", PyExc_PermissionError,
       "Authentication failed: unknown user or wrong secret, credentials missing, or the "
       "server could not prove it holds the secret."},
      {absl::StatusCode::kPermissionDenied, "PermissionDenied", PyExc_PermissionError,
       "The user's role may not make this request."},
  };
  for (const Kind& k : kinds) {
    py::tuple bases = k.also == nullptr ? py::make_tuple(py::handle(e.base))
                                        : py::make_tuple(py::handle(e.base), py::handle(k.also));
    PyObject* cls = PyErr_NewExceptionWithDoc((std::string("unloadkv.") + k.name).c_str(), k.doc,
                                              bases.ptr(), nullptr);
    e.by_code[static_cast<int>(k.code)] = cls;
    m.add_object(k.name, py::handle(cls));
  }
}

void DefineFieldRecords(py::module_& m) {
  m.def(
      "encode_fields", [](py::handle fields) { return py::bytes(EncodeFields(ToFields(fields))); },
      py::arg("fields"),
      "The field record of fields (a dict or (name, value) pairs of bytes), as bytes: what "
      "Client.merge_fields stores. A later duplicate name replaces the earlier value.");
  m.def(
      "decode_fields",
      [](const std::string& record) {
        absl::StatusOr<Fields> fields = DecodeFields(record);
        if (!fields.ok()) Raise(fields.status());
        py::dict d;
        for (const auto& [name, value] : *fields) d[py::bytes(name)] = py::bytes(value);
        return d;
      },
      py::arg("record"),
      "The fields of a field record (bytes) as a dict of bytes, in the record's order; raises "
      "InvalidArgument for bytes that are not a field record.");
}

void DefineClient(py::module_& m) {
  py::class_<ScanIterator>(m, "ScanIterator", "Iterates (key, value) pairs of a range in order.")
      .def(
          "__iter__", [](py::object self) { return self; }, "Returns the iterator itself.")
      .def("__next__", &ScanIterator::Next,
           "The next (key, value) pair; fetches the next page when this one is used up.");

  py::class_<PyClient>(m, "Client",
                       "A connection to one kvserver (server=) or to a cluster (etcd=, cluster=). "
                       "Thread-safe; a context manager that closes on exit.")
      .def(
          py::init([](const std::string& server, const std::string& etcd,
                      const std::string& cluster, const std::string& auth_file,
                      const std::string& user, double timeout, const std::string& transport,
                      const std::string& policy, int max_in_flight) {
            return std::make_unique<PyClient>(MakeOptions(
                server, etcd, cluster, auth_file, user, timeout, transport, policy, max_in_flight));
          }),
          py::arg("server") = "", py::arg("etcd") = "", py::arg("cluster") = "",
          py::arg("auth_file") = "", py::arg("user") = "", py::arg("timeout") = 5.0,
          py::arg("transport") = "soft", py::arg("policy") = "adaptive",
          py::arg("max_in_flight") = 64,
          "Connects (server: 'HOST:PORT', default 127.0.0.1:7070; or etcd: 'HOST:PORT[,...]' "
          "and cluster: a name); auth_file and user as kvclient's; timeout in seconds per "
          "request. Raises an unloadkv.Error subclass when it cannot connect.")
      .def("put", &PyClient::Put, py::arg("key"), py::arg("value"),
           "Stores value under key (both bytes).")
      .def("get", &PyClient::Get, py::arg("key"),
           "Returns the value stored under key; raises NotFound when there is none.")
      .def("merge_fields", &PyClient::MergeFields, py::arg("key"), py::arg("fields"),
           "Updates the named fields (a dict or (name, value) pairs of bytes) of the field "
           "record stored under key, keeping its other fields; with nothing stored, they become "
           "the record. Raises FailedPrecondition when the stored value is not a field record.")
      .def("delete", &PyClient::Delete, py::arg("key"),
           "Deletes key; raises NotFound when there is none.")
      .def(
          "scan",
          [](PyClient& c, const std::string& start, const std::string& end, uint32_t page_size) {
            if (page_size == 0) throw py::value_error("page_size must be at least 1");
            return ScanIterator(&c, start, end, page_size);
          },
          py::arg("start") = py::bytes(""), py::arg("end") = py::bytes(""),
          py::arg("page_size") = 1000, py::keep_alive<0, 1>(),
          "Iterates the (key, value) pairs with start <= key < end (end b'': to the last key) "
          "in key order, fetching page_size pairs per request.")
      .def("stats", &PyClient::Stats,
           "The server's figures as a dict (keys, arena_bytes, offload_writes, ...; summed "
           "over a cluster's nodes).")
      .def("put_async", &PyClient::PutAsync, py::arg("key"), py::arg("value"),
           "Starts a put; returns a concurrent.futures.Future of the new version (an int).")
      .def("get_async", &PyClient::GetAsync, py::arg("key"),
           "Starts a get; returns a concurrent.futures.Future of the value (bytes).")
      .def("delete_async", &PyClient::DeleteAsync, py::arg("key"),
           "Starts a delete; returns a concurrent.futures.Future of None.")
      .def("close", &PyClient::Close,
           "Waits for the async calls in flight, then closes the connection. Idempotent.")
      .def_property_readonly("closed", &PyClient::closed, "True once closed.")
      .def(
          "__enter__", [](py::object self) { return self; }, "Returns the client.")
      .def(
          "__exit__", [](PyClient& c, py::args) { c.Close(); }, "Closes the client.");
}

PYBIND11_MODULE(unloadkv, m) {
  m.doc() =
      "unloadkv: the Python client of the unloadkv key-value service (docs/sdk.md). Keys and "
      "values are bytes; errors are unloadkv.Error subclasses.";
  m.attr("__version__") = Version();
  // The SDK's informational lines (a connection's queue pairs closing) are not a script's
  // business; warnings and errors still reach stderr.
  SetMinLogLevel(LogLevel::kWarning);
  DefineErrors(m);
  DefineFieldRecords(m);
  DefineClient(m);
}

}  // namespace
}  // namespace python
}  // namespace unloadkv
