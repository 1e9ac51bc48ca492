#include "net/sigv4.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <chrono>
#include <cstdio>

#include "common/ascii.h"

namespace fid::net {
namespace {

using Digest = std::array<unsigned char, 32>;

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
// SHA-256 of no bytes, the payload hash of a request without a body.
constexpr std::string_view kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 0xf];
  }
  return out;
}

// EVP_Q_mac fails only on allocation failure or a missing provider: nothing to recover from,
// and a wrong signature would be silently rejected by the server much later. EIO then.
Result<Digest> hmac_sha256(std::string_view key, std::string_view data) {
  Digest out{};
  size_t out_size = 0;
  if (!EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(), key.size(),
                 reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(),
                 out.size(), &out_size) ||
      out_size != out.size()) {
    return Error{EIO, "OpenSSL HMAC-SHA256 failed"};
  }
  return out;
}

std::string_view as_view(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

// SigV4 "Trimall": no leading or trailing whitespace, inner runs of spaces as one space.
std::string trim_all(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

std::string_view date_of(const SignRequest& r) {
  return std::string_view(r.amz_date).substr(0, 8);
}

std::string scope(const SignRequest& r) {
  return std::string(date_of(r)) + "/" + r.region + "/" + r.service + "/aws4_request";
}

std::string payload_hash(const SignRequest& r) {
  return r.payload_sha256.empty() ? std::string(kEmptySha256) : r.payload_sha256;
}

// These come from SignRequest's fields and the credentials; copies of them in r.headers would
// sign a second, possibly different value.
bool set_by_signer(std::string_view lower_name) {
  return lower_name == "host" || lower_name == "x-amz-date" ||
         lower_name == "x-amz-content-sha256" || lower_name == "x-amz-security-token" ||
         lower_name == "authorization";
}

// Lower-case names, sorted; values of a repeated name joined with ',' in the order given.
std::vector<std::pair<std::string, std::string>> canonical_headers(const SignRequest& r,
                                                                   const Credentials& c) {
  std::vector<std::pair<std::string, std::string>> all;
  all.emplace_back("host", r.host);
  all.emplace_back("x-amz-date", r.amz_date);
  if (r.content_sha256_header) all.emplace_back("x-amz-content-sha256", payload_hash(r));
  if (!c.session_token.empty()) all.emplace_back("x-amz-security-token", c.session_token);
  for (const auto& [name, value] : r.headers) {
    std::string lname = ascii_lower(name);
    if (!set_by_signer(lname)) all.emplace_back(std::move(lname), trim_all(value));
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, std::string>> merged;
  for (auto& [name, value] : all) {
    if (!merged.empty() && merged.back().first == name) {
      merged.back().second += "," + value;
    } else {
      merged.emplace_back(std::move(name), std::move(value));
    }
  }
  return merged;
}

std::string signed_headers(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out;
  for (const auto& h : headers) {
    if (!out.empty()) out += ';';
    out += h.first;
  }
  return out;
}

std::string canonical_query(const Headers& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(uri_encode(name, false), uri_encode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name + "=" + value;
  }
  return out;
}

}  // namespace

std::string uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out += c;
    } else {
      auto u = static_cast<unsigned char>(c);
      out += '%';
      out += kDigits[u >> 4];
      out += kDigits[u & 0xf];
    }
  }
  return out;
}

Result<std::string> sha256_hex(std::string_view data) {
  Digest d{};
  unsigned size = 0;
  if (!EVP_Digest(data.data(), data.size(), d.data(), &size, EVP_sha256(), nullptr) ||
      size != d.size()) {
    return Error{EIO, "OpenSSL SHA-256 failed"};
  }
  return hex(d.data(), d.size());
}

std::string amz_date(long long unix_seconds) {
  using namespace std::chrono;
  sys_seconds t{seconds{unix_seconds}};
  sys_days day = floor<days>(t);
  year_month_day ymd{day};
  hh_mm_ss<seconds> time{t - day};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d%02u%02uT%02d%02d%02dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(time.hours().count()), static_cast<int>(time.minutes().count()),
                static_cast<int>(time.seconds().count()));
  return buf;
}

std::string canonical_request(const SignRequest& r, const Credentials& c) {
  auto headers = canonical_headers(r, c);
  std::string out = r.method + "\n";
  out += (r.path.empty() ? std::string("/") : r.path) + "\n";
  out += canonical_query(r.query) + "\n";
  for (const auto& [name, value] : headers) out += name + ":" + value + "\n";
  out += "\n";
  out += signed_headers(headers) + "\n";
  out += payload_hash(r);
  return out;
}

Result<std::string> string_to_sign(const SignRequest& r, const Credentials& c) {
  Result<std::string> hash = sha256_hex(canonical_request(r, c));
  if (!hash) return hash;
  return std::string(kAlgorithm) + "\n" + r.amz_date + "\n" + scope(r) + "\n" + *hash;
}

Result<std::string> signature(const SignRequest& r, const Credentials& c) {
  Result<std::string> to_sign = string_to_sign(r, c);
  if (!to_sign) return to_sign;
  // The signing key: the secret, then the date, region, service and "aws4_request" in turn.
  Result<Digest> key = hmac_sha256("AWS4" + c.secret_access_key, date_of(r));
  for (std::string_view step : {std::string_view(r.region), std::string_view(r.service), std::string_view("aws4_request")})
    if (key) key = hmac_sha256(as_view(*key), step);
  if (!key) return std::move(key).error();
  Result<Digest> sig = hmac_sha256(as_view(*key), *to_sign);
  if (!sig) return std::move(sig).error();
  return hex(sig->data(), sig->size());
}

Result<Headers> sign(const SignRequest& r, const Credentials& c) {
  if (c.anonymous()) return Headers{};
  Result<std::string> sig = signature(r, c);
  if (!sig) return Error{sig.error().code, "cannot sign the request: " + sig.error().message};
  Headers out;
  out.emplace_back("x-amz-date", r.amz_date);
  if (r.content_sha256_header) out.emplace_back("x-amz-content-sha256", payload_hash(r));
  if (!c.session_token.empty()) out.emplace_back("x-amz-security-token", c.session_token);
  out.emplace_back("Authorization", std::string(kAlgorithm) + " Credential=" + c.access_key_id + "/" + scope(r) +
                                        ", SignedHeaders=" + signed_headers(canonical_headers(r, c)) +
                                        ", Signature=" + *sig);
  return out;
}

}  // namespace fid::net
