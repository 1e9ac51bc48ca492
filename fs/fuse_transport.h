// The session's traffic on /dev/fuse: plain read and writev, through libfuse's custom I/O, so
// that the INIT reply can take what libfuse 3.14 (Debian 12) does not ask the kernel for:
// * parallel lookups: libfuse before 3.17 takes FUSE_CAP_PARALLEL_DIROPS in `want` but never
//   sends FUSE_PARALLEL_DIROPS to the kernel (libfuse commit c990534, #861), so the kernel held a
//   folder's lock for each LOOKUP and READDIR, and lookups in one folder ran one at a time;
// * shared maps of files opened with direct I/O (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6), which
//   libfuse 3.14 does not know; without it a direct-I/O file cannot be mapped (ENODEV).
#pragma once

struct fuse_session;

namespace fid::fs {

// Installs the transport on a mounted session (after fuse_session_mount). Returns 0 or -errno.
int use_own_transport(fuse_session* se);

// After INIT: whether the kernel maps files opened with direct I/O (it offered, and we took,
// FUSE_DIRECT_IO_ALLOW_MMAP).
bool kernel_maps_direct_io_files();

}  // namespace fid::fs
