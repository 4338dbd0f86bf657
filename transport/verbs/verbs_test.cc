// The verbs backend's pure logic, and its start-up errors on this machine.
#include <infiniband/verbs.h>

#include <cerrno>

#include "gtest/gtest.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_mapping.h"

namespace unloadkv::verbs {
namespace {

TEST(VerbsMappingTest, CompletionStatusesMapToTheirRnicClass) {
  EXPECT_EQ(MapWcStatus(IBV_WC_SUCCESS), rnic::WcStatus::kSuccess);
  EXPECT_EQ(MapWcStatus(IBV_WC_REM_ACCESS_ERR), rnic::WcStatus::kRemoteAccessError);
  EXPECT_EQ(MapWcStatus(IBV_WC_REM_INV_REQ_ERR), rnic::WcStatus::kRemoteInvalidRequest);
  EXPECT_EQ(MapWcStatus(IBV_WC_LOC_LEN_ERR), rnic::WcStatus::kLocalLengthError);
  EXPECT_EQ(MapWcStatus(IBV_WC_LOC_PROT_ERR), rnic::WcStatus::kLocalProtectionError);
  EXPECT_EQ(MapWcStatus(IBV_WC_RNR_RETRY_EXC_ERR), rnic::WcStatus::kRnrRetryExceeded);
  EXPECT_EQ(MapWcStatus(IBV_WC_RETRY_EXC_ERR), rnic::WcStatus::kRetryExceeded);
  EXPECT_EQ(MapWcStatus(IBV_WC_WR_FLUSH_ERR), rnic::WcStatus::kFlushed);
  // Every other failure is a failure, never success.
  for (int s = IBV_WC_SUCCESS + 1; s <= IBV_WC_TM_RNDV_INCOMPLETE; ++s) {
    EXPECT_NE(MapWcStatus(s), rnic::WcStatus::kSuccess) << s;
  }
}

TEST(VerbsMappingTest, OpcodesAndAccessFlagsMap) {
  EXPECT_EQ(MapSendOpcode(rnic::Opcode::kWriteWithImm), IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(MapSendOpcode(rnic::Opcode::kRead), IBV_WR_RDMA_READ);
  EXPECT_EQ(MapSendOpcode(rnic::Opcode::kSendWithImm), IBV_WR_SEND_WITH_IMM);
  EXPECT_EQ(MapWcOpcode(IBV_WC_RECV_RDMA_WITH_IMM), rnic::WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(MapWcOpcode(IBV_WC_RDMA_READ), rnic::WcOpcode::kRead);
  EXPECT_EQ(MapAccess(rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kHugePageBacked),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(MapRnrTimeout(absl::InfiniteDuration()).rnr_retry, 7);
  EXPECT_LT(MapRnrTimeout(absl::Milliseconds(1)).rnr_retry, 7);
  EXPECT_EQ(*MapMtu(4096), IBV_MTU_4096);
  EXPECT_FALSE(MapMtu(1500).ok());
}

TEST(VerbsMappingTest, MemoryWindowsMapToType2Verbs) {
  EXPECT_EQ(MapSendOpcode(rnic::Opcode::kBindWindow), IBV_WR_BIND_MW);
  EXPECT_EQ(MapSendOpcode(rnic::Opcode::kLocalInvalidate), IBV_WR_LOCAL_INV);
  EXPECT_EQ(MapSendOpcode(rnic::Opcode::kSendWithInvalidate), IBV_WR_SEND_WITH_INV);
  EXPECT_EQ(MapWcOpcode(IBV_WC_BIND_MW), rnic::WcOpcode::kBindWindow);
  EXPECT_EQ(MapWcOpcode(IBV_WC_LOCAL_INV), rnic::WcOpcode::kLocalInvalidate);
  EXPECT_EQ(MapWcStatus(IBV_WC_MW_BIND_ERR), rnic::WcStatus::kWindowBindError);
  EXPECT_EQ(MapAccess(rnic::kLocalWrite | rnic::kMwBind),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  // A bind keeps the window's index and changes the tag, never to the current one.
  EXPECT_EQ(NextWindowKey(0x12345600, 0x7f), 0x1234567fu);
  EXPECT_EQ(NextWindowKey(0x1234567f, 0x7f), 0x12345680u);
  EXPECT_EQ(NextWindowKey(0x123456ff, 0xff), 0x12345600u);
}

TEST(VerbsMappingTest, AddressesRoundTripAndBadOnesAreRejected) {
  VerbsAddress a;
  a.lid = 17;
  a.port = 2;
  a.mtu_bytes = 4096;
  for (int i = 0; i < 16; ++i) a.gid[i] = static_cast<uint8_t>(i * 17);
  absl::StatusOr<VerbsAddress> b = DecodeVerbsAddress(EncodeVerbsAddress(a));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, a);
  for (const char* bad : {"lid=1,gid=00,port=1,mtu=1024",
                          "lid=70000,gid=0000:0000:0000:0000:0000:0000:0000:0000,port=1,mtu=1024",
                          "lid=1,port=1,mtu=1024",
                          "lid=1,gid=0000:0000:0000:0000:0000:0000:0000:0000,port=1,mtu=1500",
                          "lid=1,gid=zzzz:0000:0000:0000:0000:0000:0000:0000,port=1,mtu=1024"}) {
    EXPECT_FALSE(DecodeVerbsAddress(bad).ok()) << bad;
  }
}

TEST(VerbsMappingTest, StartupErrorsNameTheFix) {
  absl::Status none = NoDeviceError(ENOSYS);
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.message().find("soft transport"), absl::string_view::npos);
  EXPECT_NE(none.message().find("kernel has no RDMA support"), absl::string_view::npos);
  EXPECT_NE(none.message().find("rxe"), absl::string_view::npos);
  absl::Status mem = CheckMemlock(64 << 10, false, 64 << 20);
  EXPECT_EQ(mem.code(), absl::StatusCode::kFailedPrecondition);
  for (const char* fix : {"ulimit -l", "LimitMEMLOCK", "IPC_LOCK"}) {
    EXPECT_NE(mem.message().find(fix), absl::string_view::npos) << fix;
  }
  EXPECT_TRUE(CheckMemlock(0, true, 64 << 20).ok());
  EXPECT_TRUE(CheckMemlock(128 << 20, false, 64 << 20).ok());
}

TEST(VerbsDeviceTest, OpensADeviceOrSaysClearlyWhyNot) {
  absl::StatusOr<std::unique_ptr<VerbsDevice>> d = VerbsDevice::Create({});
  if (d.ok()) {
    EXPECT_FALSE((*d)->name().empty());
    GTEST_SKIP() << "an RDMA device is present (" << (*d)->name()
                 << "); the no-device message is checked on machines without one";
  }
  std::printf("no RDMA device here, as expected on this machine: %s\n",
              d.status().ToString().c_str());
  EXPECT_NE(d.status().message().find("soft transport"), absl::string_view::npos) << d.status();
  VerbsDevice::Options bad;
  bad.mtu_bytes = 9000;
  EXPECT_EQ(VerbsDevice::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace unloadkv::verbs
