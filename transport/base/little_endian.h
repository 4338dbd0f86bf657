// Fixed-width little-endian stores and loads for wire formats, independent of host order.
#ifndef UNLOADKV_TRANSPORT_BASE_LITTLE_ENDIAN_H_
#define UNLOADKV_TRANSPORT_BASE_LITTLE_ENDIAN_H_

#include <cstddef>
#include <cstdint>

namespace unloadkv {

// Writes the sizeof(T) bytes of `v` at out[offset], least significant first.
template <typename T>
void StoreLittleEndian(char* out, size_t offset, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[offset + i] = static_cast<char>(v >> (8 * i));
}

// Reads sizeof(T) bytes at in[offset], least significant first.
template <typename T>
T LoadLittleEndian(const char* in, size_t offset) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<uint8_t>(in[offset + i])) << (8 * i);
  }
  return v;
}

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_LITTLE_ENDIAN_H_
