// The GPU L3 batch decoder's host side, over any Device (cuda/gpu_device.h): everything it
// holds is allocated when it starts (pinned views, each stream's batch buffers), so a read
// never waits on the driver's allocator; batches go out on their own stream and overlap.
#pragma once

#include <memory>

#include "codec/l3_batch.h"
#include "common/error.h"
#include "cuda/gpu.h"
#include "cuda/gpu_device.h"

namespace fid::gpu {

// Starts a decoder on `device`: streams, batch buffers and the pinned view arena from
// options.memory_bytes (split_memory). Fails with the device's error (EIO, naming the call)
// when a stream or a batch buffer cannot be made; pinned views that cannot be had are heap
// memory instead (counted in stats().pageable_views).
fid::Result<std::unique_ptr<codec::L3BatchDecoder>> start_decoder(std::shared_ptr<Device> device,
                                                                  const DecoderOptions& options);

}  // namespace fid::gpu
