// See libjpeg_glue.h.
#include "codec/libjpeg_glue.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fid::codec::libjpeg {
namespace {

void set_message(j_common_ptr c, ErrorMgr* e) {
  char text[JMSG_LENGTH_MAX];
  text[0] = '\0';
  (*c->err->format_message)(c, text);
  e->code = c->err->msg_code == JERR_OUT_OF_MEMORY ? ENOMEM : EINVAL;
  if (c->err->msg_code == JERR_NO_BACKING_STORE) {
    std::snprintf(e->message, sizeof e->message,
                  "image too large: its DCT coefficients need more than %ld MiB",
                  kMaxCoefficientMemory >> 20);
  } else {
    std::snprintf(e->message, sizeof e->message, "%s", text);
  }
}

[[noreturn]] void on_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorMgr*>(c->err);
  set_message(c, e);
  std::longjmp(e->jump, 1);
}

void on_emit_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages: ignore
  auto* e = reinterpret_cast<ErrorMgr*>(c->err);
  set_message(c, e);
  std::longjmp(e->jump, 1);  // warnings (corrupt/truncated data) are failures
}

void on_output_message(j_common_ptr) {}

void dest_init(j_compress_ptr c) {
  auto* d = reinterpret_cast<VectorDest*>(c->dest);
  if (!resize_nothrow(*d->out, d->initial)) ERREXIT1(c, JERR_OUT_OF_MEMORY, 0);
  c->dest->next_output_byte = d->out->data();
  c->dest->free_in_buffer = d->out->size();
}

boolean dest_empty(j_compress_ptr c) {
  auto* d = reinterpret_cast<VectorDest*>(c->dest);
  const size_t used = d->out->size();  // libjpeg only calls this with the buffer full
  if (!resize_nothrow(*d->out, used * 2)) ERREXIT1(c, JERR_OUT_OF_MEMORY, 0);
  c->dest->next_output_byte = d->out->data() + used;
  c->dest->free_in_buffer = d->out->size() - used;
  return TRUE;
}

void dest_term(j_compress_ptr c) {
  auto* d = reinterpret_cast<VectorDest*>(c->dest);
  d->out->resize(d->out->size() - c->dest->free_in_buffer);  // shrinking never reallocates
}

bool starts_with(const jpeg_saved_marker_ptr m, const char* tag, unsigned len) {
  return m->data_length >= len && std::memcmp(m->data, tag, len) == 0;
}

}  // namespace

void init_error_mgr(ErrorMgr& e) {
  jpeg_std_error(&e.pub);
  e.pub.error_exit = on_error_exit;
  e.pub.emit_message = on_emit_message;
  e.pub.output_message = on_output_message;
  e.message[0] = '\0';
  e.code = EINVAL;
}

fid::Error failure(const ErrorMgr& e) {
  return fid::Error{e.code, e.message[0] != '\0' ? e.message : "libjpeg failed"};
}

void on_progress(j_common_ptr c) {
  if (!c->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kMaxSourceScans) {
    auto* e = reinterpret_cast<ErrorMgr*>(c->err);
    std::snprintf(e->message, sizeof e->message, "JPEG has more than %d scans", kMaxSourceScans);
    std::longjmp(e->jump, 1);
  }
}

bool resize_nothrow(std::vector<uint8_t>& v, size_t n) noexcept {
  try {
    v.resize(n);
    return true;
  } catch (...) {
    return false;
  }
}

void write_into(j_compress_ptr c, VectorDest& dest, std::vector<uint8_t>& out, size_t initial) {
  dest.pub.init_destination = dest_init;
  dest.pub.empty_output_buffer = dest_empty;
  dest.pub.term_destination = dest_term;
  dest.out = &out;
  dest.initial = initial;
  c->dest = &dest.pub;
}

void save_markers(j_decompress_ptr src) {
  jpeg_save_markers(src, JPEG_COM, 0xFFFF);
  for (int i = 0; i < 16; ++i) jpeg_save_markers(src, JPEG_APP0 + i, 0xFFFF);
}

void copy_markers(j_decompress_ptr src, j_compress_ptr dst) {
  for (jpeg_saved_marker_ptr m = src->marker_list; m != nullptr; m = m->next) {
    if (dst->write_JFIF_header && m->marker == JPEG_APP0 && starts_with(m, "JFIF", 5)) continue;
    if (dst->write_Adobe_marker && m->marker == JPEG_APP0 + 14 && starts_with(m, "Adobe", 5)) continue;
    jpeg_write_marker(dst, m->marker, m->data, m->data_length);
  }
}

}  // namespace fid::codec::libjpeg
