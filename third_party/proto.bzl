"""cc_proto: C++ code generation with the system protoc (no download of protobuf rules)."""

def cc_proto(name, srcs, deps = [], visibility = None):
    """Generates <name> as a cc_library from .proto files in the same package.

    Args:
      name: name of the resulting cc_library.
      srcs: .proto files (in this package; imports are relative to the workspace root).
      deps: other cc_proto targets whose .proto files these import.
      visibility: visibility of the cc_library.
    """
    hdrs = [s[:-len(".proto")] + ".pb.h" for s in srcs]
    ccs = [s[:-len(".proto")] + ".pb.cc" for s in srcs]
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = hdrs + ccs,
        cmd = "protoc --proto_path=. --cpp_out=$(GENDIR) " +
              " ".join(["$(location %s)" % s for s in srcs]),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = ccs,
        hdrs = hdrs,
        deps = deps + ["//third_party:protobuf"],
        visibility = visibility,
    )
