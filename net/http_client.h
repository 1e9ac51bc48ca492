// HTTP(S) requests (GET, HEAD, PUT, POST, DELETE) on libcurl's multi interface: one transfer thread keeps up to
// max_in_flight requests on the wire over reused keep-alive connections, queues the rest, and
// retries what a server or network gets wrong (5xx, 429, S3 SlowDown, timeouts, stalls,
// refused or reset connections, bodies cut short: only their missing remainder) with
// exponential backoff and full jitter. A response's body goes straight into the caller's buffer;
// one larger than that buffer is an error, never an overflow. An upload body is read through a
// callback, from its start again on every attempt, never held whole. The thread starts on the first
// request, so a client made before fork() works in the child. No secrets in messages: they name
// the URL without its query and the cause.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "common/error.h"
#include "net/http_response.h"
#include "net/sigv4.h"
#include "net/transfer_counters.h"

namespace fid::net {

struct RetryPolicy {
  unsigned max_attempts = 8;                 // first try included
  std::chrono::milliseconds base{50};        // backoff before the first retry is at most this
  std::chrono::milliseconds cap{2000};       // ... and never more than this
  std::chrono::milliseconds budget{35000};   // no attempt starts later than this after the first

  // The pause before retry `retry` (1 = the second attempt): full jitter, uniform in
  // [0, min(cap, base * 2^(retry-1))], `unit` being a uniform draw in [0, 1).
  std::chrono::milliseconds backoff(unsigned retry, double unit) const;
};

struct HttpOptions {
  unsigned max_in_flight = 64;                      // transfers on the wire at once
  std::string ca_file;                              // PEM bundle; "" = the system CAs
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::seconds stall_timeout{5};            // no body bytes for this long: abort, retry
  // An attempt is abandoned, and retried for its missing bytes, past attempt_floor + 4 x what its
  // bytes (a range's, a body's once its length is known) should take at the observed latency and
  // rate (before any is observed: at min_rate_bps), and never runs past the retry budget unless
  // one attempt for those bytes may take longer. A server that trickles a few bytes a second
  // (enough for the stall timeout) so holds no request for longer than the retry budget.
  std::chrono::seconds attempt_floor{10};
  uint64_t min_rate_bps = 256 << 10;
  RetryPolicy retry;
  TransferCounters* counters = nullptr;              // requests (each attempt), retries, bytes
};

// What the last attempt of a request got.
struct HttpResult {
  long status = 0;                        // 0: no response
  std::string etag;
  std::optional<uint64_t> content_length;
  uint64_t body_bytes = 0;                // bytes delivered (ranged: of the whole range)
  unsigned attempts = 0;
  http::S3Error s3;                       // from an XML error body, if any
};

struct HttpRequest {
  enum class Method { get, head, put, post, del };
  Method method = Method::get;
  std::string url;            // absolute; messages show it without its query
  Headers headers;            // sent as given (If-None-Match, ...)
  // Headers added to every attempt, made just before it is sent (SigV4: a fresh date). An error
  // fails the request with it, unretried.
  std::function<Result<Headers>()> sign;
  // The body. ranged: bytes [offset, offset + dst.size()) of the object into dst (not empty).
  // Otherwise the whole body into `sink` (streamed: offset in the body, bytes; false aborts the
  // request), or if there is no sink into dst, which it must fit.
  bool ranged = false;
  uint64_t offset = 0;
  std::span<uint8_t> dst;
  std::function<bool(uint64_t, std::span<const uint8_t>)> sink;
  // put, post: the request body, body_size bytes read through `body` (offset in the body, room
  // for the next bytes) -> bytes given (more than 0 until the end), called on the transfer
  // thread from offset 0 on every attempt. Its error fails the request with it, unretried. No
  // `body`: an empty body. The answer of a put, post or del with neither sink nor dst is dropped.
  uint64_t body_size = 0;
  std::function<Result<size_t>(uint64_t, std::span<uint8_t>)> body;
  // When it becomes true the request ends (within about a second, unretried) with ECANCELED.
  const std::atomic<bool>* cancel = nullptr;
  // Called once, on the transfer thread (do not block in it; submitting more is fine). The
  // Error's code: ENOENT for 404, EACCES for 401/403, ECANCELED when the client was destroyed
  // first, EIO otherwise.
  std::function<void(Status, const HttpResult&)> done;
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions opts = {});
  // Requests not finished yet complete with ECANCELED; then the thread is joined.
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  void submit(HttpRequest request);
  // submit() and wait.
  std::pair<Status, HttpResult> perform(HttpRequest request);

  const HttpOptions& options() const { return opts_; }

  // About bandwidth x latency in bytes, from the transfers completed so far: the moving average
  // of the time to a response's first byte times that of the rate at which a body then
  // arrives. 0 until a body of 256 KiB or more has been timed.
  uint64_t bandwidth_delay_bytes() const;

 private:
  // Takes one completed transfer's timing into the averages (transfer thread).
  void observe(uint64_t body_bytes, double first_byte_s, double body_s);
  // The longest an attempt for `bytes` bytes may take (HttpOptions::attempt_floor).
  std::chrono::milliseconds attempt_deadline(uint64_t bytes) const;
  struct Engine;  // the curl multi handle and everything only the transfer thread touches
  void run();

  const HttpOptions opts_;
  std::mutex mu_;
  std::unique_ptr<Engine> engine_;  // made on the first submit (after any fork)
  mutable std::mutex timing_mu_;
  double latency_s_ = 0, rate_bps_ = 0;  // moving averages; 0: no sample yet
  std::thread thread_;
};

// "GET", "HEAD", "PUT", "POST", "DELETE".
const char* method_name(HttpRequest::Method method);

// "https://h/p?x=1" -> "https://h/p": what messages show of a URL.
std::string url_for_messages(std::string_view url);

}  // namespace fid::net
