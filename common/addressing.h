// How S3 requests name a bucket: one enum for the setting (config/, `addressing=`) and the
// requests (net/aws_config.h), which both may include common/.
#pragma once

namespace fid {

// auto: virtual-hosted for AWS's own endpoint with a DNS-compatible bucket, path style for any
// other endpoint (net/aws_config.cpp decides); path: endpoint/bucket/key; virtual_host:
// bucket.endpoint/key (spelled `virtual` in the config file and -o).
enum class Addressing { auto_, path, virtual_host };

}  // namespace fid
