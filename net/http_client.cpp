#include "net/http_client.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <vector>

#include "common/ascii.h"
#include "common/log.h"

namespace fid::net {

namespace {

// Bodies at least this large time the link's rate (smaller ones are mostly latency).
constexpr uint64_t kTimedBodyBytes = 256 << 10;

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxErrorBody = 16 * 1024;  // of an error response, kept for its S3 code

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}
}  // namespace

std::string url_for_messages(std::string_view url) { return std::string(url.substr(0, url.find_first_of("?#"))); }

const char* method_name(HttpRequest::Method method) {
  static constexpr const char* kNames[] = {"GET", "HEAD", "PUT", "POST", "DELETE"};  // in Method's order
  return kNames[static_cast<size_t>(method)];
}

// One request and the state of its current attempt.
struct Transfer {
  HttpRequest req;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  char curl_error[CURL_ERROR_SIZE] = {};
  unsigned attempts = 0;
  unsigned throttled = 0;  // attempts answered "slow down" (503, 429, SlowDown): they cost time, not attempts
  Clock::time_point first_start{}, attempt_start{};
  bool deadline_hit = false;  // the current attempt ran past its deadline (on_progress)
  Clock::time_point deadline{};  // the current attempt's, for deadline_bytes (on_progress)
  uint64_t deadline_bytes = 0;
  const void* engine = nullptr;  // the HttpClient::Engine driving it (private to the client; for on_progress)
  uint64_t kept = 0;  // ranged: leading bytes of dst already complete (from earlier attempts)
  uint64_t sent = 0;  // bytes of the upload body given to curl in this attempt
  std::optional<Error> body_error;  // the upload body could not be read: fails the request
  // The current attempt.
  long status = 0;
  std::optional<http::ContentRange> content_range;
  std::optional<uint64_t> content_length;
  std::string etag;
  uint64_t body = 0;
  bool overflow = false, sink_refused = false;
  std::string error_body;

  ~Transfer() { curl_slist_free_all(header_list); }
  bool cancelled() const { return req.cancel && req.cancel->load(std::memory_order_relaxed); }
  uint64_t want_first() const { return req.offset + kept; }
  uint64_t want_len() const { return req.dst.size() - kept; }
  bool error_status() const { return http::classify_status(status) != http::StatusClass::success; }
  // An answer nobody asked to keep (a PUT's, a DELETE's): counted, dropped.
  bool drops_body() const {
    using M = HttpRequest::Method;
    return (req.method == M::put || req.method == M::post || req.method == M::del) && !req.sink && req.dst.empty();
  }

  void new_attempt() {
    status = 0;
    content_range.reset();
    content_length.reset();
    etag.clear();
    body = 0;
    overflow = sink_refused = false;
    deadline_hit = false;
    deadline = {};
    error_body.clear();
    curl_error[0] = '\0';
  }
};

// The transfer thread's loop: take what was submitted and what is due again, start what fits,
// drive the wire and judge the attempts that ended, sleep until there is more to do. Everything
// here but `submitted` and `stop` is the transfer thread's own.
struct HttpClient::Engine {
  HttpClient& client;
  const HttpOptions& opts;
  CURLM* multi = nullptr;
  // Shared with submitters, under the client's mutex.
  std::deque<std::unique_ptr<Transfer>> submitted;
  bool stop = false;
  // The transfer thread's own.
  std::deque<std::unique_ptr<Transfer>> waiting;                     // to start, oldest first
  std::multimap<Clock::time_point, std::unique_ptr<Transfer>> timers;  // retries, by due time
  std::vector<std::unique_ptr<Transfer>> active;                    // on the wire
  std::vector<CURL*> idle_handles;
  std::mt19937_64 rng{std::random_device{}()};

  explicit Engine(HttpClient& c) : client(c), opts(c.opts_) {
    multi = curl_multi_init();
    // Up to one connection per transfer in flight, all kept open for reuse.
    const auto max = static_cast<long>(max_in_flight());
    curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, max);
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, max);
  }
  ~Engine() {
    for (CURL* e : idle_handles) curl_easy_cleanup(e);
    if (multi) curl_multi_cleanup(multi);
  }

  unsigned max_in_flight() const { return std::max(1u, opts.max_in_flight); }
  bool admit();
  void start_waiting();
  void drive();
  void sleep();
  void shut_down();

  void start(std::unique_ptr<Transfer> t);
  CURL* take_handle();
  Status build_headers(Transfer& t);
  void configure(CURL* h, Transfer& t);
  void configure_method(CURL* h, Transfer& t);
  void finish(std::unique_ptr<Transfer> t, CURLcode code);
  void retry_or_fail(std::unique_ptr<Transfer> t, const http::Judgement& j);
  void release_handle(Transfer& t);
  void complete(std::unique_ptr<Transfer> t, Status s);
  void fail(std::unique_ptr<Transfer> t, int code, std::string_view cause, bool retried_out);
  void cancel(std::unique_ptr<Transfer> t);
  // curl calls this at least once a second during an attempt: non-zero aborts it (cancelled, or
  // past its deadline).
  static int on_progress(void* user, curl_off_t dltotal, curl_off_t, curl_off_t ultotal, curl_off_t);
  // When the current attempt of t must end: its own deadline for the bytes it moves (a range's,
  // a body's once its length is known), and never past the request's whole deadline: the retry
  // budget after its first attempt, or longer where one attempt for those bytes may take longer.
  Clock::time_point attempt_end(const Transfer& t, uint64_t bytes) const;
};

namespace {

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  const std::string_view line(data, n);
  if (auto code = http::parse_status_line(line)) {  // a new response (after a 100, a redirect...)
    const uint64_t body = t->body;
    t->new_attempt();
    t->body = body;
    t->status = *code;
    return n;
  }
  if (auto h = http::split_header(line)) {
    const auto& [name, value] = *h;
    if (ascii_iequals(name, "content-range")) t->content_range = http::parse_content_range(value);
    else if (ascii_iequals(name, "content-length")) t->content_length = http::parse_content_length(value);
    else if (ascii_iequals(name, "etag")) t->etag = http::parse_etag(value).value_or("");
  }
  return n;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (t->error_status()) {  // an error document: keep its start for the S3 error code
    t->error_body.append(data, std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, t->error_body.size())));
    return n;
  }
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(data), n);
  if (t->drops_body()) {
    // counted below, kept nowhere
  } else if (t->req.sink) {
    if (!t->req.sink(t->body, bytes)) {
      t->sink_refused = true;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
  } else {
    const uint64_t room = t->req.dst.size() - t->kept - t->body;
    if (n > room) {
      t->overflow = true;
      return 0;
    }
    std::memcpy(t->req.dst.data() + t->kept + t->body, data, n);
  }
  t->body += n;
  return n;
}

// The next bytes of the upload body; its end or error ends the attempt.
size_t on_read(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const uint64_t left = t->req.body ? t->req.body_size - t->sent : 0;
  if (left == 0) return 0;
  const size_t room = static_cast<size_t>(std::min<uint64_t>(left, size * count));
  Result<size_t> got = t->req.body(t->sent, {reinterpret_cast<uint8_t*>(data), room});
  if (got.ok() && *got > 0 && *got <= room) {
    t->sent += *got;
    return *got;
  }
  t->body_error = got.ok() ? Error{EIO, fmt::format("the body ended at {} of its {} bytes", t->sent, t->req.body_size)}
                           : std::move(got).error();
  return CURL_READFUNC_ABORT;
}

// curl rewinds the body to send it again on the same attempt (a redirect, an auth round trip).
int on_seek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > t->req.body_size) return CURL_SEEKFUNC_CANTSEEK;
  t->sent = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

}  // namespace

HttpClient::HttpClient(HttpOptions opts) : opts_(std::move(opts)) { global_init(); }

HttpClient::~HttpClient() {
  {
    std::lock_guard lock(mu_);
    if (!engine_) return;
    engine_->stop = true;
  }
  curl_multi_wakeup(engine_->multi);
  thread_.join();
}

void HttpClient::submit(HttpRequest request) {
  auto t = std::make_unique<Transfer>();
  t->req = std::move(request);
  CURLM* multi = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!engine_) {
      engine_ = std::make_unique<Engine>(*this);
      thread_ = std::thread([this] { run(); });
    }
    engine_->submitted.push_back(std::move(t));
    multi = engine_->multi;
  }
  curl_multi_wakeup(multi);
}

std::pair<Status, HttpResult> HttpClient::perform(HttpRequest request) {
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  std::pair<Status, HttpResult> out;
  request.done = [&](Status s, const HttpResult& r) {
    std::lock_guard lock(m);
    out = {std::move(s), r};
    finished = true;
    cv.notify_one();
  };
  submit(std::move(request));
  std::unique_lock lock(m);
  cv.wait(lock, [&] { return finished; });
  return out;
}

void HttpClient::run() {
  Engine& e = *engine_;
  while (e.admit()) {
    e.start_waiting();
    e.drive();
    e.sleep();
  }
  e.shut_down();
}

// Moves what was submitted, then the retries now due, to the waiting line; false once stopping.
bool HttpClient::Engine::admit() {
  {
    std::lock_guard lock(client.mu_);
    while (!submitted.empty()) {
      waiting.push_back(std::move(submitted.front()));
      submitted.pop_front();
    }
    if (stop) return false;
  }
  const auto now = Clock::now();
  while (!timers.empty() && timers.begin()->first <= now) {
    // Due retries go first: they have waited longest.
    waiting.push_front(std::move(timers.begin()->second));
    timers.erase(timers.begin());
  }
  return true;
}

void HttpClient::Engine::start_waiting() {
  while (active.size() < max_in_flight() && !waiting.empty()) {
    auto t = std::move(waiting.front());
    waiting.pop_front();
    start(std::move(t));
  }
}

// Lets curl move the bytes, then judges each attempt that ended.
void HttpClient::Engine::drive() {
  int running = 0;
  curl_multi_perform(multi, &running);
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    auto it = std::find_if(active.begin(), active.end(), [&](const auto& t) { return t->easy == m->easy_handle; });
    if (it == active.end()) continue;
    auto t = std::move(*it);
    *it = std::move(active.back());
    active.pop_back();
    finish(std::move(t), m->data.result);
  }
}

// Until a socket is ready, curl's own timer fires, the next retry is due or a submitter wakes
// us; not at all when something can be started.
void HttpClient::Engine::sleep() {
  int wait_ms = 1000;
  if (!waiting.empty() && active.size() < max_in_flight()) wait_ms = 0;
  if (!timers.empty()) {
    const auto until = std::chrono::ceil<std::chrono::milliseconds>(timers.begin()->first - Clock::now()).count();
    wait_ms = std::clamp<int>(static_cast<int>(std::min<int64_t>(until, wait_ms)), 0, wait_ms);
  }
  curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
}

// Shutting down: everything not finished is cancelled.
void HttpClient::Engine::shut_down() {
  for (auto& t : active) {
    curl_multi_remove_handle(multi, t->easy);
    idle_handles.push_back(t->easy);
    curl_slist_free_all(t->header_list);
    t->header_list = nullptr;
    cancel(std::move(t));
  }
  active.clear();
  for (auto& [when, t] : timers) cancel(std::move(t));
  timers.clear();
  for (auto& t : waiting) cancel(std::move(t));
  waiting.clear();
  for (;;) {  // a cancelled request's callback may submit another
    std::deque<std::unique_ptr<Transfer>> late;
    {
      std::lock_guard lock(client.mu_);
      late.swap(submitted);
    }
    if (late.empty()) break;
    for (auto& t : late) cancel(std::move(t));
  }
}

// A new attempt of t on the wire, or t failed.
void HttpClient::Engine::start(std::unique_ptr<Transfer> t) {
  if (t->cancelled()) {
    fail(std::move(t), ECANCELED, "cancelled", false);
    return;
  }
  t->attempt_start = Clock::now();
  if (t->attempts == 0) t->first_start = t->attempt_start;
  t->engine = this;
  ++t->attempts;
  t->new_attempt();
  t->sent = 0;  // the upload body goes from its start again
  t->body_error.reset();
  if (opts.counters) {
    opts.counters->requests.fetch_add(1, std::memory_order_relaxed);
    if (t->attempts > 1) opts.counters->retries.fetch_add(1, std::memory_order_relaxed);
  }
  CURL* h = take_handle();
  if (!h) {
    fail(std::move(t), EIO, "cannot make a curl handle", false);
    return;
  }
  t->easy = h;
  if (Status s = build_headers(*t); !s) {
    release_handle(*t);
    fail(std::move(t), s.error().code, s.error().message, false);
    return;
  }
  configure(h, *t);
  if (curl_multi_add_handle(multi, h) != CURLM_OK) {
    release_handle(*t);
    fail(std::move(t), EIO, "cannot start the transfer", false);
    return;
  }
  active.push_back(std::move(t));
}

CURL* HttpClient::Engine::take_handle() {
  if (idle_handles.empty()) return curl_easy_init();
  CURL* h = idle_handles.back();
  idle_handles.pop_back();
  curl_easy_reset(h);
  return h;
}

// The attempt's header list: the range still wanted, the request's headers, the signer's (its
// error fails the request).
Status HttpClient::Engine::build_headers(Transfer& t) {
  curl_slist_free_all(t.header_list);
  t.header_list = nullptr;
  const auto add_header = [&](std::string_view name, std::string_view value) {
    t.header_list = curl_slist_append(t.header_list, fmt::format("{}: {}", name, value).c_str());
  };
  if (t.req.ranged) add_header("Range", http::range_header(t.want_first(), t.want_len()));
  for (const auto& [name, value] : t.req.headers) add_header(name, value);
  if (t.req.sign) {
    Result<Headers> signed_headers = t.req.sign();
    if (!signed_headers.ok()) return std::move(signed_headers).error();
    for (const auto& [name, value] : *signed_headers) add_header(name, value);
  }
  add_header("Accept-Encoding", "identity");  // the bytes as stored, never re-encoded
  // The body follows the headers at once (waiting for "100 Continue" costs a second when none comes).
  if (t.req.method == HttpRequest::Method::put || t.req.method == HttpRequest::Method::post) add_header("Expect", "");
  return {};
}

void HttpClient::Engine::configure(CURL* h, Transfer& t) {
  curl_easy_setopt(h, CURLOPT_URL, t.req.url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts.connect_timeout.count()));
  // A stall: under 1 byte/s for stall_timeout ends the attempt with CURLE_OPERATION_TIMEDOUT.
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, std::max<long>(1, static_cast<long>(opts.stall_timeout.count())));
  curl_easy_setopt(h, CURLOPT_USERAGENT, "fidelityfs");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, t.header_list);
  configure_method(h, t);
  if (!opts.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, opts.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t.curl_error);
  curl_easy_setopt(h, CURLOPT_PRIVATE, &t);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
}

Clock::time_point HttpClient::Engine::attempt_end(const Transfer& t, uint64_t bytes) const {
  const auto own = client.attempt_deadline(bytes);
  return std::min(t.attempt_start + own, t.first_start + std::max<std::chrono::milliseconds>(opts.retry.budget, own));
}

int HttpClient::Engine::on_progress(void* user, curl_off_t dltotal, curl_off_t, curl_off_t ultotal, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->cancelled()) return 1;
  // A response trickling just fast enough for the stall limit, of a body of any size (the index
  // included), or an upload the server takes that slowly: cut, and asked again while the
  // request's deadline allows.
  const uint64_t bytes = t->req.ranged ? t->want_len() : static_cast<uint64_t>(std::max<curl_off_t>({dltotal, ultotal, 0}));
  if (bytes != t->deadline_bytes || t->deadline == Clock::time_point{}) {  // once per size, not per call
    t->deadline_bytes = bytes;
    t->deadline = static_cast<const Engine*>(t->engine)->attempt_end(*t, bytes);
  }
  if (Clock::now() < t->deadline) return 0;
  t->deadline_hit = true;
  return 1;
}

// The method, and where an upload body comes from (never curl's default: stdin).
void HttpClient::Engine::configure_method(CURL* h, Transfer& t) {
  using M = HttpRequest::Method;
  const M m = t.req.method;
  const auto size = static_cast<curl_off_t>(t.req.body ? t.req.body_size : 0);
  if (m == M::head) curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (m == M::del) curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  if (m == M::put) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, size);
  }
  if (m == M::post) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, size);
    if (!t.req.body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
  }
  if (m == M::put || (m == M::post && t.req.body)) {
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &t);
  }
}

// t's handle goes back to the pool, for the next attempt of any transfer.
void HttpClient::Engine::release_handle(Transfer& t) { idle_handles.push_back(std::exchange(t.easy, nullptr)); }

// An attempt ended: done, failed, or due again after a backoff.
void HttpClient::Engine::finish(std::unique_ptr<Transfer> t, CURLcode code) {
  curl_off_t pre = 0, first = 0, total = 0;  // microseconds from the attempt's start
  curl_easy_getinfo(t->easy, CURLINFO_PRETRANSFER_TIME_T, &pre);
  curl_easy_getinfo(t->easy, CURLINFO_STARTTRANSFER_TIME_T, &first);
  curl_easy_getinfo(t->easy, CURLINFO_TOTAL_TIME_T, &total);
  const curl_off_t first_byte_us = first - pre, body_us = total - first;
  curl_multi_remove_handle(multi, t->easy);
  release_handle(*t);
  curl_slist_free_all(t->header_list);
  t->header_list = nullptr;
  if (opts.counters) opts.counters->bytes.fetch_add(t->body, std::memory_order_relaxed);

  if (t->cancelled() || t->body_error) {  // neither is retried
    Error e = t->cancelled() ? Error{ECANCELED, "cancelled"} : std::move(*t->body_error);
    fail(std::move(t), e.code, e.message, false);
    return;
  }
  if (t->deadline_hit) code = CURLE_OPERATION_TIMEDOUT;  // aborted by on_progress at its deadline: a timeout
  http::Attempt a;
  a.transport = http::transport_of(code);
  if (code == CURLE_WRITE_ERROR && t->overflow) a.transport = http::Transport::body_too_big;
  a.transport_detail = t->curl_error[0] ? std::string_view(t->curl_error) : std::string_view(curl_easy_strerror(code));
  if (code == CURLE_WRITE_ERROR && t->sink_refused) a.transport_detail = "the body could not be stored";
  a.status = t->status;
  a.ranged = t->req.ranged;
  a.want_first = t->want_first();
  a.want_len = t->req.ranged ? t->want_len() : t->req.dst.size();
  a.content_range = t->content_range;
  a.content_length = t->content_length;
  a.head = t->req.method == HttpRequest::Method::head;
  a.body_bytes = t->body;
  const http::Judgement j = http::judge(a);
  switch (j.verdict) {
    case http::Verdict::done:
      if (t->body >= kTimedBodyBytes && first_byte_us >= 0 && body_us > 0)
        client.observe(t->body, static_cast<double>(first_byte_us) / 1e6, static_cast<double>(body_us) / 1e6);
      complete(std::move(t), {});
      return;
    case http::Verdict::fail: {
      const int err = a.transport == http::Transport::ok ? http::errno_for_status(t->status) : EIO;  // before t moves
      fail(std::move(t), err, j.cause, false);
      return;
    }
    case http::Verdict::retry:
      retry_or_fail(std::move(t), j);
      return;
  }
}

// Due again after a backoff, unless the attempts or the time budget are spent.
void HttpClient::Engine::retry_or_fail(std::unique_ptr<Transfer> t, const http::Judgement& j) {
  t->kept += j.kept;
  // A server asking to slow down is throttling, not failing: such answers spend the time budget
  // only, so a storm of them delays a request instead of failing it.
  if (t->status == 503 || t->status == 429) ++t->throttled;
  const auto now = Clock::now();
  const auto pause = opts.retry.backoff(t->attempts, std::uniform_real_distribution<double>(0.0, 1.0)(rng));
  if (t->attempts - t->throttled >= opts.retry.max_attempts || now + pause - t->first_start > opts.retry.budget) {
    fail(std::move(t), EIO, j.cause, true);
    return;
  }
  // The cause where it happens; the request's failure, if it comes, is logged by its caller.
  log_debug("{}: {} (attempt {}); again in {} ms", url_for_messages(t->req.url), j.cause, t->attempts,
            std::chrono::duration_cast<std::chrono::milliseconds>(pause).count());
  timers.emplace(now + pause, std::move(t));
}

void HttpClient::Engine::complete(std::unique_ptr<Transfer> t, Status s) {
  HttpResult r;
  r.status = t->status;
  r.etag = t->etag;
  r.content_length = t->content_length;
  r.body_bytes = t->kept + t->body;
  r.attempts = t->attempts;
  if (!t->error_body.empty()) r.s3 = http::parse_s3_error(t->error_body);
  if (t->req.done) t->req.done(std::move(s), r);
}

void HttpClient::Engine::fail(std::unique_ptr<Transfer> t, int code, std::string_view cause, bool retried_out) {
  std::string what(cause);
  if (!t->error_body.empty()) {
    const http::S3Error s3 = http::parse_s3_error(t->error_body);
    if (!s3.code.empty()) what += " " + s3.code;
  }
  if (retried_out) what += fmt::format(" after {} attempts", t->attempts);
  Error err{code, fmt::format("{}: {}", url_for_messages(t->req.url), what)};
  complete(std::move(t), std::move(err));
}

void HttpClient::Engine::cancel(std::unique_ptr<Transfer> t) {
  Error err{ECANCELED, fmt::format("{}: cancelled: the HTTP client is shutting down", url_for_messages(t->req.url))};
  complete(std::move(t), std::move(err));
}

}  // namespace fid::net
