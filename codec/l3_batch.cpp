#include "codec/l3_batch.h"

#include <cerrno>
#include <cstring>
#include <new>

#include "codec/l3.h"

namespace fid::codec {
namespace {

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

void l3_decode_job_on_cpu(L3Job& job) {
  fid::Status decoded = l3_decode_into(job.l3, job.pixels);
  job.ok = decoded.ok();
  if (!decoded) job.error = std::move(decoded).error().message;
}

void L3BatchLayout::stage(uint8_t* dst) const {
  std::memcpy(dst, plan.tasks.data(), plan.tasks.size() * sizeof(l3k::PatchTask));
  if (!plan.tables.empty()) std::memcpy(dst + tables_at, plan.tables.data(), plan.tables.size() * sizeof(l3k::HuffTable));
  for (size_t i = 0; i < blocked.size(); ++i)
    std::memcpy(dst + data_at + in_base[i], blocked[i]->l3.data(), blocked[i]->l3.size());
}

void l3_layout_batch(std::span<L3Job* const> jobs, L3BatchLayout& b) {
  b.plan.clear();
  b.blocked.clear();
  b.in_base.clear();
  b.out_base.clear();
  b.in_bytes = b.out_bytes = 0;
  for (L3Job* job : jobs) {
    job->ok = false;
    job->error.clear();
    const size_t tasks_before = b.plan.tasks.size(), tables_before = b.plan.tables.size();
    fid::Result<L3Info> planned =
        l3_plan_image(job->l3, b.in_bytes, b.out_bytes, 0, static_cast<uint32_t>(b.blocked.size()), b.plan);
    if (!planned) {
      l3_decode_job_on_cpu(*job);  // INTER_PATCH, or the precise reason
      continue;
    }
    const L3Info& info = *planned;
    if (info.raw_bytes() != job->pixels.size()) {
      b.plan.tasks.resize(tasks_before);
      b.plan.tables.resize(tables_before);
      job->error = "the output buffer does not match the image size";
      continue;
    }
    b.blocked.push_back(job);
    b.in_base.push_back(b.in_bytes);
    b.out_base.push_back(b.out_bytes);
    b.in_bytes += align_up(job->l3.size(), 16);
    b.out_bytes += align_up(info.raw_bytes(), 256);
  }
  b.tables_at = align_up(b.plan.tasks.size() * sizeof(l3k::PatchTask), 64);
  b.data_at = align_up(b.tables_at + b.plan.tables.size() * sizeof(l3k::HuffTable), 64);
  b.staged_bytes = b.data_at + b.in_bytes;
}

void l3_finish_batch(const L3BatchLayout& b, const int* status) {
  for (size_t i = 0; i < b.blocked.size(); ++i) {
    L3Job* job = b.blocked[i];
    if (status[i] == 0)
      job->ok = true;
    else
      l3_decode_job_on_cpu(*job);
  }
}

}  // namespace fid::codec
