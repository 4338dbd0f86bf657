// The release this tree builds (kvserver --version, the SDK's Version(), the packages'
// version: docs/build.md). Raise the major with any incompatible change of the installed SDK
// (docs/sdk.md, "Versioning"); client/client.h's UNLOADKV_VERSION macros must equal it
// (client.cc checks at compile time).
#ifndef UNLOADKV_TRANSPORT_BASE_VERSION_H_
#define UNLOADKV_TRANSPORT_BASE_VERSION_H_

namespace unloadkv {

inline constexpr char kVersion[] = "1.0.0";

}  // namespace unloadkv

#endif  // UNLOADKV_TRANSPORT_BASE_VERSION_H_
