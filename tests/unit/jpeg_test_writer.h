// The error manager of the tests' libjpeg writers: an error prints libjpeg's message and jumps
// back to the writer, which returns no bytes (the test then fails on them).
#pragma once

#include <csetjmp>
#include <cstdio>

extern "C" {
#include <jpeglib.h>
}

namespace fid::testutil {

struct JpegWriterErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

[[noreturn]] inline void jpeg_writer_error_exit(j_common_ptr c) {
  char msg[JMSG_LENGTH_MAX];
  (*c->err->format_message)(c, msg);
  std::fprintf(stderr, "test JPEG writer: %s\n", msg);
  std::longjmp(reinterpret_cast<JpegWriterErrors*>(c->err)->jump, 1);
}

}  // namespace fid::testutil
