// writebench's flags (defined in writebench_main.cc), for its other files.
#ifndef UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_FLAGS_H_
#define UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_FLAGS_H_

#include "gflags/gflags.h"

DECLARE_string(fabric);
DECLARE_string(policy);
DECLARE_string(working_set);
DECLARE_string(write_size);
DECLARE_string(pattern);
DECLARE_int64(ops);
DECLARE_int64(warmup);
DECLARE_int32(window);
DECLARE_int32(unload_workers);
DECLARE_int32(staging_lanes);
DECLARE_int32(connections);
DECLARE_int64(connection_writes);
DECLARE_bool(shared_target_model);
DECLARE_bool(memory_protection);
DECLARE_uint64(seed);
DECLARE_string(csv);
DECLARE_bool(sweep);
DECLARE_string(sweep_sizes);
DECLARE_string(trace);
DECLARE_string(png);

#endif  // UNLOADKV_TRANSPORT_BENCH_WRITEBENCH_FLAGS_H_
