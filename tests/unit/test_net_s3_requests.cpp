// The parts of writing a store to S3 that need no server: how an object is split into parts,
// the CompleteMultipartUpload request body, the answers' UploadId and errors, and the signed
// requests' URLs and headers (query parameters, payload hash, the copy source of a server-side
// copy), and the HEAD's answer that settles a CompleteMultipartUpload whose answer was lost
// (net/s3_requests.h). The uploads and copies themselves run against Ceph RGW in
// tests/integration/test_pack_s3.py (pack and merge).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>

#include "net/remote_location.h"
#include "net/s3_requests.h"
#include "test_files.h"

namespace fid::net {
namespace {

constexpr uint64_t MiB = 1ull << 20;

void expect_valid_parts(const std::vector<std::pair<uint64_t, uint64_t>>& parts, uint64_t size) {
  ASSERT_FALSE(parts.empty());
  ASSERT_LE(parts.size(), kMaxParts);
  uint64_t at = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    EXPECT_EQ(parts[k].first, at) << k;
    if (k + 1 < parts.size()) {
      EXPECT_GE(parts[k].second, kMinPartSize) << k;
    }
    EXPECT_GT(parts[k].second, 0u) << k;
    at += parts[k].second;
  }
  EXPECT_EQ(at, size);
}

TEST(S3UploadParts, EqualPartsAndTheRestLast) {
  const auto parts = upload_parts(21 * MiB, 8 * MiB);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], std::make_pair(uint64_t{0}, 8 * MiB));
  EXPECT_EQ(parts[1], std::make_pair(8 * MiB, 8 * MiB));
  EXPECT_EQ(parts[2], std::make_pair(16 * MiB, 5 * MiB));
  expect_valid_parts(parts, 21 * MiB);
  EXPECT_EQ(upload_parts(16 * MiB, 8 * MiB).size(), 2u);  // an exact multiple: no empty last part
  expect_valid_parts(upload_parts(16 * MiB + 1, 8 * MiB), 16 * MiB + 1);
  expect_valid_parts(upload_parts(1, 8 * MiB), 1);
}

TEST(S3UploadParts, NeverBelowFiveMibNorAboveTenThousandParts) {
  const auto small = upload_parts(12 * MiB, 1 * MiB);  // asked for 1 MiB parts: S3 refuses them
  EXPECT_EQ(small.size(), 3u);
  EXPECT_EQ(small[0].second, kMinPartSize);
  expect_valid_parts(small, 12 * MiB);
  const uint64_t huge = 200ull << 30;  // 200 GiB in 8 MiB parts would be 25600 parts
  const auto parts = upload_parts(huge, 8 * MiB);
  EXPECT_LE(parts.size(), kMaxParts);
  expect_valid_parts(parts, huge);
}

TEST(S3UploadXml, UploadIdFromTheAnswer) {
  const std::string rgw =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult "
      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>b</Bucket><Key>p/records/000000.rec</Key>"
      "<UploadId>2~ZlqVR5tNQ5H3kpR3AzW0xJq8mqQ_iRc</UploadId></InitiateMultipartUploadResult>";
  EXPECT_EQ(parse_upload_id(rgw), "2~ZlqVR5tNQ5H3kpR3AzW0xJq8mqQ_iRc");
  EXPECT_EQ(parse_upload_id("<UploadId>\n  abc.DEF-1\n</UploadId>"), "abc.DEF-1");  // blanks around it trimmed
  EXPECT_EQ(parse_upload_id(""), std::nullopt);
  EXPECT_EQ(parse_upload_id("<UploadId></UploadId>"), std::nullopt);
  EXPECT_EQ(parse_upload_id("<UploadId>abc"), std::nullopt);                    // cut short
  EXPECT_EQ(parse_upload_id("<UploadId>a b</UploadId>"), std::nullopt);         // a blank inside
  EXPECT_EQ(parse_upload_id("<UploadId>a&amp;b</UploadId>"), std::nullopt);     // markup
  EXPECT_EQ(parse_upload_id("<UploadId>a\x01</UploadId>"), std::nullopt);       // a control character
  EXPECT_EQ(parse_upload_id("<UploadId>" + std::string(1025, 'x') + "</UploadId>"), std::nullopt);
  EXPECT_EQ(parse_upload_id("<UploadId>" + std::string(1024, 'x') + "</UploadId>"), std::string(1024, 'x'));
}

TEST(S3UploadXml, CompleteBodyNumbersThePartsAndEscapesTheEtags) {
  EXPECT_EQ(complete_multipart_body({"\"a1\"", "\"b&2\""}),
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            "<Part><PartNumber>1</PartNumber><ETag>&quot;a1&quot;</ETag></Part>"
            "<Part><PartNumber>2</PartNumber><ETag>&quot;b&amp;2&quot;</ETag></Part>"
            "</CompleteMultipartUpload>");
}

TEST(S3UploadXml, CompleteAnswerErrorsAfterA200) {
  EXPECT_EQ(complete_multipart_error("<CompleteMultipartUploadResult><Location>x</Location><ETag>\"e-3\"</ETag>"
                                     "</CompleteMultipartUploadResult>"),
            std::nullopt);
  EXPECT_EQ(complete_multipart_error(""), std::nullopt);
  const auto e = complete_multipart_error("<?xml version=\"1.0\"?>\n<Error><Code>InternalError</Code><Message>We "
                                          "encountered an internal error.</Message></Error>");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "InternalError");
  EXPECT_EQ(e->message, "We encountered an internal error.");
  EXPECT_EQ(complete_multipart_error("<Error></Error>")->code, "InternalError");  // an error without a code
}

net::RemoteLocation location() {
  net::RemoteLocation w;
  w.text = "s3://bkt/sets/one";
  w.origin = "http://127.0.0.1:7480";
  w.host_header = "127.0.0.1:7480";
  w.base_path = "/bkt/sets/one";
  w.bucket = "bkt";
  w.key_prefix = "sets/one";
  w.bucket_path = "/bkt";
  w.sign = true;
  w.credentials = {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  w.region = "us-east-1";
  return w;
}

TEST(S3UploadRequests, QueryParametersInTheUrl) {
  const net::RemoteLocation w = location();
  EXPECT_EQ(w.url_of("records/000001.rec", {{"uploads", ""}}), "http://127.0.0.1:7480/bkt/sets/one/records/000001.rec?uploads");
  EXPECT_EQ(w.url_of("index.sqlite", {{"partNumber", "3"}, {"uploadId", "2~a/b+c"}}),
            "http://127.0.0.1:7480/bkt/sets/one/index.sqlite?partNumber=3&uploadId=2~a%2Fb%2Bc");
  EXPECT_EQ(w.url_of("index.sqlite"), "http://127.0.0.1:7480/bkt/sets/one/index.sqlite");
}

std::string header(const net::Headers& h, std::string_view name) {
  auto it = std::find_if(h.begin(), h.end(), [&](const auto& kv) { return kv.first == name; });
  return it == h.end() ? "" : it->second;
}

TEST(S3UploadRequests, SignedWithTheMethodQueryAndPayload) {
  const net::RemoteLocation w = location();
  const net::Headers query = {{"partNumber", "1"}, {"uploadId", "u1"}};
  auto put = w.signer(net::HttpRequest::Method::put, "records/000000.rec", query, "UNSIGNED-PAYLOAD");
  ASSERT_TRUE(put);
  const net::Headers h = put().value();
  EXPECT_EQ(header(h, "x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
  // The same request signed by hand at the signer's date gives the same Authorization.
  net::SignRequest r;
  r.method = "PUT";
  r.host = w.host_header;
  r.path = "/bkt/sets/one/records/000000.rec";
  r.query = query;
  r.payload_sha256 = "UNSIGNED-PAYLOAD";
  r.amz_date = header(h, "x-amz-date");
  r.region = w.region;
  EXPECT_EQ(header(h, "Authorization"), header(sign(r, w.credentials).value(), "Authorization"));
  r.method = "GET";  // another method is another signature
  EXPECT_NE(header(h, "Authorization"), header(sign(r, w.credentials).value(), "Authorization"));
  // An empty body is the empty string's hash.
  const net::Headers d = w.signer(net::HttpRequest::Method::del, "index.sqlite")().value();
  EXPECT_EQ(header(d, "x-amz-content-sha256"), net::sha256_hex("").value());
}

TEST(S3UploadRequests, MethodNames) {
  using M = net::HttpRequest::Method;
  EXPECT_STREQ(net::method_name(M::get), "GET");
  EXPECT_STREQ(net::method_name(M::head), "HEAD");
  EXPECT_STREQ(net::method_name(M::put), "PUT");
  EXPECT_STREQ(net::method_name(M::post), "POST");
  EXPECT_STREQ(net::method_name(M::del), "DELETE");
}

TEST(S3UploadXml, CopyAnswerErrorsAfterA200) {
  EXPECT_EQ(copy_object_error("<?xml version=\"1.0\"?><CopyObjectResult><LastModified>2024-01-01T00:00:00.000Z"
                              "</LastModified><ETag>\"abc\"</ETag></CopyObjectResult>"),
            std::nullopt);
  EXPECT_EQ(copy_object_error(""), std::nullopt);
  const auto e = copy_object_error("<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "SlowDown");
  EXPECT_EQ(e->message, "Reduce your request rate.");
  // A multipart result is not a copy result: its error is not taken for success.
  EXPECT_TRUE(copy_object_error("<CompleteMultipartUploadResult/><Error><Code>X</Code></Error>").has_value());
}

TEST(S3UploadRequests, CopySourceIsBucketAndEncodedKey) {
  net::RemoteLocation from = location();
  EXPECT_EQ(copy_source(from, "records/000001.rec"), "/bkt/sets/one/records/000001.rec");
  from.key_prefix = "";
  EXPECT_EQ(copy_source(from, "records/000001.rec"), "/bkt/records/000001.rec");
  from.key_prefix = "a b/c+d/\xc3\xa9t\xc3\xa9";
  EXPECT_EQ(copy_source(from, "records/000001.rec"), "/bkt/a%20b/c%2Bd/%C3%A9t%C3%A9/records/000001.rec");
}

TEST(S3UploadRequests, CopySourceHeaderIsSigned) {
  const net::RemoteLocation w = location();
  const net::Headers copy = {{"x-amz-copy-source", "/bkt/sets/two/records/000001.rec"}};
  const net::Headers h = w.signer(net::HttpRequest::Method::put, "records/000003.rec", {}, {}, copy)().value();
  EXPECT_NE(header(h, "Authorization").find("SignedHeaders=host;x-amz-content-sha256;x-amz-copy-source;x-amz-date"),
            std::string::npos)
      << header(h, "Authorization");
  net::SignRequest r;
  r.method = "PUT";
  r.host = w.host_header;
  r.path = "/bkt/sets/one/records/000003.rec";
  r.headers = copy;
  r.amz_date = header(h, "x-amz-date");
  r.region = w.region;
  EXPECT_EQ(header(h, "Authorization"), header(sign(r, w.credentials).value(), "Authorization"));
  r.headers[0].second = "/bkt/sets/two/records/000002.rec";  // another source is another signature
  EXPECT_NE(header(h, "Authorization"), header(sign(r, w.credentials).value(), "Authorization"));
}

TEST(S3UploadRequests, LocationKnowsBucketAndPrefix) {
  net::S3Options path_style;
  path_style.endpoint = "http://127.0.0.1:7480/base";
  path_style.region = "us-east-1";
  path_style.addressing = net::Addressing::path;
  const net::StoreUrl url = net::parse_store_url("s3://bkt/sets/a b").value();
  const net::RemoteLocation p = remote_location(url, path_style).value();
  EXPECT_EQ(p.bucket, "bkt");
  EXPECT_EQ(p.key_prefix, "sets/a b");
  EXPECT_EQ(p.bucket_path, "/base/bkt");
  EXPECT_EQ(p.base_path, "/base/bkt/sets/a%20b");
  net::S3Options virtual_host = path_style;
  virtual_host.addressing = net::Addressing::virtual_host;
  const net::RemoteLocation v = remote_location(url, virtual_host).value();
  EXPECT_EQ(v.bucket, "bkt");
  EXPECT_EQ(v.key_prefix, "sets/a b");
  EXPECT_EQ(v.bucket_path, "/base");
  EXPECT_EQ(v.base_path, "/base/sets/a%20b");
  EXPECT_EQ(copy_source(v, "index.sqlite"), "/bkt/sets/a%20b/index.sqlite");
  const net::RemoteLocation root = remote_location(net::parse_store_url("s3://bkt").value(), path_style).value();
  EXPECT_EQ(root.key_prefix, "");
  EXPECT_EQ(root.base_path, "/base/bkt");
}

// md5("part one"), md5("part two") and the MD5 of their 32 bytes (Python's hashlib).
const std::vector<std::string> kPartEtags = {"\"3303e12af474ca11d85ed2966a932992\"",
                                             "\"3ea4e15b91a17dc76052c56cfcdf67a2\""};
constexpr std::string_view kObjectEtag = "\"0732917abc3288784e318ac0aab1757a-2\"";

TEST(S3UploadLostComplete, MultipartEtagIsTheMd5OfThePartsMd5s) {
  EXPECT_EQ(multipart_etag(kPartEtags), kObjectEtag);
  EXPECT_EQ(multipart_etag({"3303e12af474ca11d85ed2966a932992", "3EA4E15B91A17DC76052C56CFCDF67A2"}), kObjectEtag);
  EXPECT_EQ(multipart_etag({"\"3303e12af474ca11d85ed2966a932992\"", "\"kms-not-an-md5\""}), "");
  EXPECT_EQ(multipart_etag({"3303e12af474ca11d85ed2966a93299"}), "");  // 31 digits
}

TEST(S3UploadLostComplete, TheUploadsObjectIsAccepted) {
  const uint64_t size = 13 * MiB;
  EXPECT_EQ(completed_object_mismatch(200, kObjectEtag, size, size, kPartEtags), std::nullopt);
  EXPECT_EQ(completed_object_mismatch(200, "\"0732917ABC3288784E318AC0AAB1757A-2\"", size, size, kPartEtags),
            std::nullopt);
  EXPECT_EQ(completed_object_mismatch(200, "", size, size, kPartEtags), std::nullopt);  // no ETag: the size
  // Parts whose ETags are not MD5s: the object's "-N" must count them.
  const std::vector<std::string> opaque = {"\"x1\"", "\"x2\""};
  EXPECT_EQ(completed_object_mismatch(200, "\"abc-2\"", size, size, opaque), std::nullopt);
}

TEST(S3UploadLostComplete, AnythingElseIsRefusedAndSaid) {
  const uint64_t size = 13 * MiB;
  EXPECT_EQ(completed_object_mismatch(404, "", std::nullopt, size, kPartEtags), "there is no such object");
  EXPECT_EQ(completed_object_mismatch(0, "", std::nullopt, size, kPartEtags), "a HEAD of the object got no answer");
  EXPECT_EQ(completed_object_mismatch(403, "", std::nullopt, size, kPartEtags), "a HEAD of the object got HTTP 403");
  EXPECT_EQ(completed_object_mismatch(200, kObjectEtag, std::nullopt, size, kPartEtags),
            "a HEAD of the object did not say its size");
  EXPECT_EQ(completed_object_mismatch(200, kObjectEtag, size - 1, size, kPartEtags),
            fmt::format("the object holds {} bytes, not {}", size - 1, size));
  // An earlier object of the same size: one PUT, or other parts.
  const auto single = completed_object_mismatch(200, "\"3303e12af474ca11d85ed2966a932992\"", size, size, kPartEtags);
  ASSERT_TRUE(single);
  EXPECT_NE(single->find("is not that of these parts (\"0732917abc3288784e318ac0aab1757a-2\")"), std::string::npos);
  EXPECT_TRUE(completed_object_mismatch(200, "\"0732917abc3288784e318ac0aab1757b-2\"", size, size, kPartEtags));
  const std::vector<std::string> opaque = {"\"x1\"", "\"x2\""};
  EXPECT_EQ(completed_object_mismatch(200, "\"abc-3\"", size, size, opaque),
            "the object's ETag \"abc-3\" is not that of an object of 2 parts");
  EXPECT_TRUE(completed_object_mismatch(200, "\"abc\"", size, size, opaque));
  EXPECT_TRUE(completed_object_mismatch(200, "\"abc-12\"", size, size, opaque));
}

TEST(S3UploadConditional, IfMatchIsSentAndSigned) {
  const RemoteLocation where = location();
  HttpRequest req = put_object(where, "index.sqlite", 3, [](uint64_t, std::span<uint8_t>) -> Result<size_t> { return 0; },
                               "\"abc\"");
  EXPECT_NE(std::find(req.headers.begin(), req.headers.end(), std::make_pair(std::string("If-Match"), std::string("\"abc\""))),
            req.headers.end());
  Result<Headers> signed_headers = req.sign();
  ASSERT_TRUE(signed_headers) << signed_headers.error().message;
  std::string authorization;
  for (const auto& [name, value] : *signed_headers)
    if (name == "Authorization") authorization = value;
  EXPECT_NE(authorization.find("if-match"), std::string::npos) << authorization;
  const HttpRequest plain = put_object(where, "x", 1, req.body);
  EXPECT_TRUE(std::none_of(plain.headers.begin(), plain.headers.end(), [](const auto& h) { return h.first == "If-Match"; }));
}

TEST(S3UploadConditional, SinglePutEtagIsTheQuotedMd5OfTheFile) {
  testutil::TempDir dir;
  const auto file = dir.path() / "f";
  { std::ofstream(file) << ""; }
  EXPECT_EQ(single_put_etag(file.string()).value(), "\"d41d8cd98f00b204e9800998ecf8427e\"");
  { std::ofstream(file) << "The quick brown fox jumps over the lazy dog"; }
  EXPECT_EQ(single_put_etag(file.string()).value(), "\"9e107d9d372bb6826bd81d3542a419d6\"");
  EXPECT_EQ(single_put_etag((dir.path() / "absent").string()).error().code, ENOENT);
}

TEST(S3UploadXml, AnswerSinkKeepsUpToItsLimitAndStartsAgainOnARetry) {
  auto body = std::make_shared<std::string>();
  const std::string page(kMaxAnswer + 1000, 'x');  // a listing's page is larger than other answers
  const auto bytes = [](const std::string& s) { return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
  EXPECT_FALSE(answer_sink(body)(0, bytes(page)));
  auto listing = answer_sink(body, kMaxAnswer * 2);
  EXPECT_TRUE(listing(0, bytes(page)));
  EXPECT_EQ(*body, page);
  EXPECT_TRUE(listing(0, bytes(std::string("retry"))));  // a retry's body from offset 0 again
  EXPECT_EQ(*body, "retry");
  EXPECT_FALSE(listing(kMaxAnswer * 2, bytes(std::string("y"))));
}

}  // namespace
}  // namespace fid::net
