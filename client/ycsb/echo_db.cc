#include "client/ycsb/echo_db.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "transport/base/little_endian.h"

namespace unloadkv::ycsb {

absl::StatusOr<std::unique_ptr<Db>> EchoDb::Connect(const std::string& address,
                                                    uint32_t record_bytes) {
  absl::StatusOr<sockaddr_in> sa = ParseHostPort(address);
  if (!sa.ok()) return sa.status();
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("echo: socket");
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&*sa), sizeof(*sa)) != 0) {
    return ErrnoError(absl::StrCat("echo: connect to ", address));
  }
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::unique_ptr<Db>(new EchoDb(std::move(fd), record_bytes));
}

absl::Status EchoDb::Exchange(const std::string& head, size_t request_bytes, uint32_t reply_bytes) {
  buffer_.assign(8 + request_bytes, '\0');
  StoreLittleEndian<uint32_t>(buffer_.data(), 0, static_cast<uint32_t>(request_bytes));
  StoreLittleEndian<uint32_t>(buffer_.data(), 4, reply_bytes);
  std::copy_n(head.data(), std::min(head.size(), request_bytes), buffer_.data() + 8);
  if (absl::Status st = SendAll(fd_.get(), buffer_); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("echo: ", st.message()));
  }
  buffer_.resize(std::max<size_t>(reply_bytes, 1));
  if (absl::Status st = RecvAll(fd_.get(), buffer_.data(), reply_bytes); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("echo: ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status EchoDb::Read(const std::string& key, const std::vector<std::string>& fields,
                          Record* out) {
  out->clear();
  size_t request = key.size();
  for (const std::string& f : fields) request += f.size();
  return Exchange(key, request, record_bytes_);
}

absl::Status EchoDb::Scan(const std::string&, int, const std::vector<std::string>&,
                          std::vector<Record>*) {
  return absl::UnimplementedError("echo: scans are not modeled");
}

absl::Status EchoDb::Update(const std::string& key, const Record& values) {
  size_t request = key.size();
  for (const auto& [name, value] : values) request += name.size() + value.size();
  return Exchange(key, request, kStatusBytes);
}

absl::Status EchoDb::Insert(const std::string& key, const Record& values) {
  return Update(key, values);
}

absl::Status EchoDb::Delete(const std::string& key) {
  return Exchange(key, key.size(), kStatusBytes);
}

}  // namespace unloadkv::ycsb
