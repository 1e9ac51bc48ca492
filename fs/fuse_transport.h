// The session's traffic on /dev/fuse: plain read and writev, through libfuse's custom I/O, so
// that the INIT reply can offer the kernel parallel lookups. libfuse before 3.17 (Debian 12 has
// 3.14) takes FUSE_CAP_PARALLEL_DIROPS in `want` but never sends FUSE_PARALLEL_DIROPS to the
// kernel (libfuse commit c990534, #861), so the kernel holds a folder's lock for each LOOKUP and
// READDIR: lookups in one folder ran one at a time, each waiting for the one before it (a
// sequential level is made during its lookup).
#pragma once

struct fuse_session;

namespace fid::fs {

// Installs the transport on a mounted session (after fuse_session_mount). Returns 0 or -errno.
int use_parallel_dirops_transport(fuse_session* se);

}  // namespace fid::fs
