// SigV4 against AWS's published vectors. Every expected canonical request, string to sign and
// signature below is copied from AWS material, never computed by this code:
//  - "Signature Version 4 test suite" (formerly docs.aws.amazon.com/general/latest/gr/
//    signature-v4-test-suite.html), as kept by AWS in github.com/awslabs/aws-c-auth,
//    tests/aws-signing-test-suite/v4/<case>/{request.txt, context.json,
//    header-canonical-request.txt, header-string-to-sign.txt, header-signature.txt,
//    header-signed-request.txt}. Credentials AKIDEXAMPLE, 20150830T123600Z, us-east-1,
//    service "service".
//  - Amazon S3 API Reference, "Signature Calculations for the Authorization Header:
//    Transferring Payload in a Single Chunk", section "Examples: Signature Calculations"
//    (docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html): examplebucket,
//    AKIAIOSFODNN7EXAMPLE, 20130524T000000Z, us-east-1, s3.
#include <gtest/gtest.h>

#include <string>

#include "net/sigv4.h"

using namespace fid::net;

namespace {

constexpr const char* kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// The generic suite: no x-amz-content-sha256 unless the case signs the body.
SignRequest suite_request(std::string method, std::string path) {
  SignRequest r;
  r.method = std::move(method);
  r.host = "example.amazonaws.com";
  r.path = std::move(path);
  r.amz_date = "20150830T123600Z";
  r.region = "us-east-1";
  r.service = "service";
  r.content_sha256_header = false;
  return r;
}

Credentials suite_credentials() {
  return {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
}

std::string suite_sts(const char* canonical_request_sha256) {
  return std::string("AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n") +
         canonical_request_sha256;
}

SignRequest s3_request(std::string method, std::string path) {
  SignRequest r;
  r.method = std::move(method);
  r.host = "examplebucket.s3.amazonaws.com";
  r.path = std::move(path);
  r.amz_date = "20130524T000000Z";
  r.region = "us-east-1";
  r.service = "s3";
  r.content_sha256_header = true;
  return r;
}

Credentials s3_credentials() {
  return {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
}

std::string s3_sts(const char* canonical_request_sha256) {
  return std::string("AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n") +
         canonical_request_sha256;
}

std::string header(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "<absent>";
}

}  // namespace

TEST(Sigv4Primitives, Sha256AndEncoding) {
  EXPECT_EQ(sha256_hex("").value(), kEmptySha256);
  // The body of the suite's post-x-www-form-urlencoded case and of the S3 PUT example, with the
  // payload hashes those documents give.
  EXPECT_EQ(sha256_hex("Param1=value1").value(),
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  EXPECT_EQ(sha256_hex("Welcome to Amazon S3.").value(),
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");

  EXPECT_EQ(uri_encode("AZaz09-._~", false), "AZaz09-._~");
  EXPECT_EQ(uri_encode("a b+c=d&e/f", false), "a%20b%2Bc%3Dd%26e%2Ff");
  EXPECT_EQ(uri_encode("a b+c=d&e/f", true), "a%20b%2Bc%3Dd%26e/f");
  EXPECT_EQ(uri_encode("\xE1\x88\xB4", false), "%E1%88%B4");
  EXPECT_EQ(uri_encode(std::string("\0\xff", 2), false), "%00%FF");
  EXPECT_EQ(uri_encode("test$file.text", true), "test%24file.text");

  EXPECT_EQ(amz_date(0), "19700101T000000Z");
  EXPECT_EQ(amz_date(1440938160), "20150830T123600Z");  // the suite's timestamp
  EXPECT_EQ(amz_date(1369353600), "20130524T000000Z");  // the S3 examples' timestamp
  EXPECT_EQ(amz_date(951782399), "20000228T235959Z");
  EXPECT_EQ(amz_date(951782400), "20000229T000000Z");  // leap day
}

// Suite case get-vanilla.
TEST(Sigv4Suite, GetVanilla) {
  SignRequest r = suite_request("GET", "/");
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"));
  EXPECT_EQ(signature(r, c).value(), "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

// Suite case get-vanilla-query-order-key-case: GET /?Param2=value2&Param1=value1.
TEST(Sigv4Suite, GetVanillaQueryOrderKeyCase) {
  SignRequest r = suite_request("GET", "/");
  r.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0"));
  EXPECT_EQ(signature(r, c).value(), "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

// Suite case get-vanilla-query-order-encoded: GET /?Param-3=Value3&Param=Value2&%E1%88%B4=Value1
// (the query here decoded): sorted by the encoded name.
TEST(Sigv4Suite, GetVanillaQueryOrderEncoded) {
  SignRequest r = suite_request("GET", "/");
  r.query = {{"Param-3", "Value3"}, {"Param", "Value2"}, {"\xE1\x88\xB4", "Value1"}};
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\n%E1%88%B4=Value1&Param=Value2&Param-3=Value3\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71"));
  EXPECT_EQ(signature(r, c).value(), "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac");
}

// Suite case get-vanilla-query-unreserved: unreserved characters are not encoded.
TEST(Sigv4Suite, GetVanillaQueryUnreserved) {
  const std::string unreserved =
      "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  SignRequest r = suite_request("GET", "/");
  r.query = {{unreserved, unreserved}};
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\n" + unreserved + "=" + unreserved +
                "\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177"));
  EXPECT_EQ(signature(r, c).value(), "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197");
}

// Suite case get-vanilla-utf8-query: GET /?ሴ=bar.
TEST(Sigv4Suite, GetVanillaUtf8Query) {
  SignRequest r = suite_request("GET", "/");
  r.query = {{"\xE1\x88\xB4", "bar"}};
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(signature(r, c).value(), "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04");
}

// Suite case get-utf8: GET /ሴ; the path is given already encoded, as sent.
TEST(Sigv4Suite, GetUtf8Path) {
  SignRequest r = suite_request("GET", "/" + uri_encode("\xE1\x88\xB4", true));
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/%E1%88%B4\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102"));
  EXPECT_EQ(signature(r, c).value(), "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

// Suite case get-header-value-trim: names lower-cased, values trimmed, inner spaces collapsed.
TEST(Sigv4Suite, GetHeaderValueTrim) {
  SignRequest r = suite_request("GET", "/");
  r.headers = {{"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}};
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\n"
            "x-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7"));
  EXPECT_EQ(signature(r, c).value(), "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736");
}

// Suite case get-header-key-duplicate: a repeated header signs its values in order, joined.
TEST(Sigv4Suite, GetHeaderKeyDuplicate) {
  SignRequest r = suite_request("GET", "/");
  r.headers = {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}};
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\n"
            "x-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c"));
  EXPECT_EQ(signature(r, c).value(), "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea");
}

// Suite case post-vanilla-query: POST /?Param1=value1.
TEST(Sigv4Suite, PostVanillaQuery) {
  SignRequest r = suite_request("POST", "/");
  r.query = {{"Param1", "value1"}};
  Credentials c = suite_credentials();
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd"));
  EXPECT_EQ(signature(r, c).value(), "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11");
}

// Suite case post-x-www-form-urlencoded (aws-c-auth's version signs the body: context.json has
// "sign_body": true, which adds x-amz-content-sha256 as S3 requests have it).
TEST(Sigv4Suite, PostFormUrlencodedSignedBody) {
  SignRequest r = suite_request("POST", "/");
  r.headers = {{"Content-Type", "application/x-www-form-urlencoded"}, {"Content-Length", "13"}};
  r.payload_sha256 = sha256_hex("Param1=value1").value();
  r.content_sha256_header = true;
  Credentials c = suite_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\n"
            "host:example.amazonaws.com\n"
            "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
            "x-amz-date:20150830T123600Z\n\n"
            "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb"));
  EXPECT_EQ(signature(r, c).value(), "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b");
  // header-signed-request.txt
  Headers added = *sign(r, c);
  EXPECT_EQ(header(added, "x-amz-content-sha256"),
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  EXPECT_EQ(header(added, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date, "
            "Signature=d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b");
}

// Suite case get-vanilla-with-session-token: the token is a signed header and is sent.
TEST(Sigv4Suite, SessionTokenIsSignedAndAdded) {
  SignRequest r = suite_request("GET", "/");
  Credentials c = suite_credentials();
  c.session_token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n"
            "x-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267\n"
            "\nhost;x-amz-date;x-amz-security-token\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            suite_sts("067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b"));
  EXPECT_EQ(signature(r, c).value(), "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8");
  // header-signed-request.txt
  Headers added = *sign(r, c);
  EXPECT_EQ(header(added, "x-amz-security-token"), c.session_token);
  EXPECT_EQ(header(added, "x-amz-date"), "20150830T123600Z");
  EXPECT_EQ(header(added, "x-amz-content-sha256"), "<absent>");
  EXPECT_EQ(header(added, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date;x-amz-security-token, "
            "Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8");
}

// S3 example "GET Object": the first 10 bytes of test.txt.
TEST(Sigv4S3, GetObjectWithRange) {
  SignRequest r = s3_request("GET", "/test.txt");
  r.headers = {{"Range", "bytes=0-9"}};
  Credentials c = s3_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            s3_sts("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"));
  EXPECT_EQ(signature(r, c).value(), "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  Headers added = *sign(r, c);
  EXPECT_EQ(header(added, "x-amz-content-sha256"), kEmptySha256);
  EXPECT_EQ(header(added, "x-amz-security-token"), "<absent>");
  EXPECT_EQ(header(added, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

// S3 example "PUT Object": a signed body, a '$' in the key, the Date header signed.
TEST(Sigv4S3, PutObject) {
  SignRequest r = s3_request("PUT", "/" + uri_encode("test$file.text", true));
  r.headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
  r.payload_sha256 = sha256_hex("Welcome to Amazon S3.").value();
  Credentials c = s3_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"
            "host:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
            "x-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  EXPECT_EQ(string_to_sign(r, c).value(),
            s3_sts("9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d"));
  EXPECT_EQ(signature(r, c).value(), "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

// S3 example "GET Bucket Lifecycle": a query parameter without a value signs as "lifecycle=".
TEST(Sigv4S3, GetBucketLifecycle) {
  SignRequest r = s3_request("GET", "/");
  r.query = {{"lifecycle", ""}};
  Credentials c = s3_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\nlifecycle=\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            s3_sts("9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca"));
  EXPECT_EQ(signature(r, c).value(), "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

// S3 example "Get Bucket (List Objects)": GET /?max-keys=2&prefix=J, given out of order here.
TEST(Sigv4S3, ListObjects) {
  SignRequest r = s3_request("GET", "/");
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};
  Credentials c = s3_credentials();
  EXPECT_EQ(canonical_request(r, c),
            "GET\n/\nmax-keys=2&prefix=J\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(string_to_sign(r, c).value(),
            s3_sts("df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7"));
  EXPECT_EQ(signature(r, c).value(), "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

// The signer's own rules (not from AWS's vectors): what it takes from the fields, and anonymous.
TEST(Sigv4Signer, FieldsWinOverCallerHeadersAndAnonymousAddsNothing) {
  SignRequest r = s3_request("GET", "/test.txt");
  r.headers = {{"Range", "bytes=0-9"}};
  Credentials c = s3_credentials();
  const std::string expected = canonical_request(r, c);
  SignRequest with_copies = r;
  with_copies.headers.emplace_back("Host", "other.example.com");
  with_copies.headers.emplace_back("X-Amz-Date", "19990101T000000Z");
  with_copies.headers.emplace_back("Authorization", "stale");
  EXPECT_EQ(canonical_request(with_copies, c), expected);

  EXPECT_TRUE(sign(r, Credentials{})->empty());
  // A session token changes the signed headers, so a token cannot be swapped in transit.
  Credentials with_token = c;
  with_token.session_token = "token";
  EXPECT_NE(signature(r, with_token).value(), signature(r, c).value());
  EXPECT_NE(canonical_request(r, with_token).find("x-amz-security-token:token\n"),
            std::string::npos);
}
