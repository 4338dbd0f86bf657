"""static_archive: one .a holding every object of a C++ library and of the libraries under it.

Bazel 4 has neither cc_shared_library nor a rule for a combined static archive; this rule reads
the linker inputs of `deps` (CcInfo) and merges their position-independent archives and
objects with `ar -M`. System libraries, which the wrappers in //third_party name by link
options only, stay outside: the archive's users link them (the `.pc` file's Libs.private, the
CMake package's INTERFACE_LINK_LIBRARIES). The archive's link options are written beside it
(`NAME.linkopts`, one per line) so packaging states them without repeating them."""

def _static_archive_impl(ctx):
    archives = []
    objects = []
    linkopts = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            for flag in linker_input.user_link_flags:
                if flag not in linkopts:
                    linkopts.append(flag)
            for lib in linker_input.libraries:
                a = lib.pic_static_library or lib.static_library
                if a != None:
                    archives.append(a)
                else:
                    objects.extend(lib.pic_objects or lib.objects)
    out = ctx.outputs.archive
    script = ["CREATE " + out.path] + ["ADDLIB " + a.path for a in archives]
    script += ["ADDMOD " + o.path for o in objects] + ["SAVE", "END"]
    mri = ctx.actions.declare_file(ctx.label.name + ".mri")
    ctx.actions.write(mri, "\n".join(script) + "\n")
    ctx.actions.run_shell(
        inputs = archives + objects + [mri],
        outputs = [out],
        command = "ar -M < %s && ranlib %s" % (mri.path, out.path),
        mnemonic = "StaticArchive",
        progress_message = "Archiving %s" % out.short_path,
    )
    ctx.actions.write(ctx.outputs.linkopts, "\n".join(linkopts) + "\n")
    return [DefaultInfo(files = depset([out, ctx.outputs.linkopts]))]

static_archive = rule(
    implementation = _static_archive_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
    },
    outputs = {
        "archive": "%{name}.a",
        "linkopts": "%{name}.linkopts",
    },
)
