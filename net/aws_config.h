// Credentials, region and endpoint for s3:// stores, taken the way AWS's own tools take them:
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else AWS_PROFILE (default
// "default") in ~/.aws/credentials and ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE,
// AWS_CONFIG_FILE override the paths); AWS_REGION / AWS_DEFAULT_REGION / the profile's region;
// AWS_ENDPOINT_URL / the profile's endpoint_url. Explicit options (-o endpoint=,region=) win.
// Reading files and the environment only; no network. The ini parser is fuzzed
// (tests/fuzz/fuzz_aws_config.cpp).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/addressing.h"
#include "common/error.h"
#include "net/sigv4.h"
#include "net/url.h"

namespace fid::net {

using Addressing = fid::Addressing;  // common/addressing.h

struct S3Options {            // from -o / the config file; empty = not given
  std::string endpoint;       // -o endpoint=URL
  std::string region;         // -o region=NAME
  std::string profile;        // -o profile=NAME
  Addressing addressing = Addressing::auto_;  // -o addressing=path|virtual
};

struct S3Target {
  Credentials credentials;    // anonymous when none are configured
  std::string credentials_from;  // "environment", "profile NAME in FILE", "none": for messages
  std::string region;         // us-east-1 when none is configured
  Endpoint endpoint;          // https://s3.REGION.amazonaws.com unless configured
  // Path style (endpoint/bucket/key) or virtual-hosted (bucket.endpoint/key). auto: virtual
  // for AWS's own endpoint with a DNS-compatible bucket, path style for any other endpoint.
  bool path_style = true;
};

// One [section] of an ini file: key -> value (keys lower-cased, values trimmed).
using IniSection = std::map<std::string, std::string>;
// Parses an AWS ini file ("[default]", "[profile x]", "key = value", '#'/';' comments).
// Sections named "profile x" are stored as "x". Never fails: bad lines are skipped.
std::map<std::string, IniSection> parse_aws_ini(std::string_view text);

// Resolves the target for `url` (an s3:// URL). `getenv` is injectable for tests (default
// ::getenv); HOME comes from it too. An empty variable counts as unset; missing files count as
// empty. A profile named by S3Options.profile or AWS_PROFILE that is in neither file is an
// error. Errors name the setting or file and the cause, never a secret.
Result<S3Target> resolve_s3(const StoreUrl& url, const S3Options& opts,
                            const std::function<const char*(const char*)>& getenv = {});

}  // namespace fid::net
