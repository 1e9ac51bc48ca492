#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "net/url.h"
#include "test_result.h"

using namespace fid::net;
using fid::testutil::value_or_throw;

namespace {

// The error's message; fails the test when parsing succeeded.
std::string url_error(std::string_view text) {
  auto r = parse_store_url(text);
  EXPECT_FALSE(r.ok()) << text << " parsed";
  if (r.ok()) return "";
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_EQ(r.error().message.rfind("URL", 0), 0u) << r.error().message;
  return r.error().message;
}

}  // namespace

TEST(StoreUrl, LocalPaths) {
  for (std::string_view text : {"/data/store", "store", "./a/b", "relative/dir/", "~/x",
                                "/odd/name://x", "C:/not-a-scheme-here", "a b", "s3:/b"}) {
    StoreUrl u = value_or_throw(parse_store_url(text));
    EXPECT_EQ(u.kind, StoreUrl::Kind::local) << text;
    EXPECT_FALSE(u.remote());
    EXPECT_EQ(u.local, text);
    EXPECT_EQ(u.text, text);
  }
  url_error("");
}

TEST(StoreUrl, S3BucketAndPrefix) {
  StoreUrl u = value_or_throw(parse_store_url("s3://my-bucket.1/datasets/imagenet/"));
  EXPECT_EQ(u.kind, StoreUrl::Kind::s3);
  EXPECT_TRUE(u.remote());
  EXPECT_EQ(u.bucket, "my-bucket.1");
  EXPECT_EQ(u.prefix, "datasets/imagenet");
  EXPECT_EQ(u.text, "s3://my-bucket.1/datasets/imagenet/");

  u = value_or_throw(parse_store_url("s3://abc"));
  EXPECT_EQ(u.bucket, "abc");
  EXPECT_EQ(u.prefix, "");
  u = value_or_throw(parse_store_url("s3://abc/"));
  EXPECT_EQ(u.prefix, "");
  u = value_or_throw(parse_store_url("S3://abc/x//"));
  EXPECT_EQ(u.kind, StoreUrl::Kind::s3);
  EXPECT_EQ(u.prefix, "x");
  u = value_or_throw(parse_store_url("s3://abc/my data/100%/"));  // raw key text
  EXPECT_EQ(u.prefix, "my data/100%");
  url_error("s3://abc/a\nb");
  u = value_or_throw(parse_store_url("s3://" + std::string(63, 'a') + "/p"));
  EXPECT_EQ(u.bucket.size(), 63u);
}

TEST(StoreUrl, S3BadBuckets) {
  EXPECT_NE(url_error("s3://").find("no bucket"), std::string::npos);
  EXPECT_NE(url_error("s3:///prefix").find("no bucket"), std::string::npos);
  std::string m = url_error("s3://ab/p");
  EXPECT_NE(m.find("s3://ab/p"), std::string::npos) << m;
  EXPECT_NE(m.find("3-63"), std::string::npos) << m;
  url_error("s3://" + std::string(64, 'a'));
  url_error("s3://My-Bucket/p");
  url_error("s3://under_score/p");
  url_error("s3://bucket//p");
}

TEST(StoreUrl, HttpAndHttps) {
  StoreUrl u = value_or_throw(parse_store_url("http://127.0.0.1:7480/bucket/store/"));
  EXPECT_EQ(u.kind, StoreUrl::Kind::http);
  EXPECT_FALSE(u.http.https);
  EXPECT_EQ(u.http.host, "127.0.0.1");
  EXPECT_EQ(u.http.port, 7480);
  EXPECT_EQ(u.http.base_path, "/bucket/store");
  EXPECT_EQ(u.http.host_header(), "127.0.0.1:7480");
  EXPECT_EQ(u.http.origin(), "http://127.0.0.1:7480");

  u = value_or_throw(parse_store_url("https://Data.Example.com/a%20b"));
  EXPECT_TRUE(u.http.https);
  EXPECT_EQ(u.http.host, "data.example.com");
  EXPECT_EQ(u.http.port, 443);
  EXPECT_TRUE(u.http.default_port());
  EXPECT_EQ(u.http.base_path, "/a%20b");
  EXPECT_EQ(u.http.host_header(), "data.example.com");
  EXPECT_EQ(u.http.origin(), "https://data.example.com");

  u = value_or_throw(parse_store_url("http://h"));
  EXPECT_EQ(u.http.port, 80);
  EXPECT_EQ(u.http.base_path, "");
  u = value_or_throw(parse_store_url("http://h:443/"));
  EXPECT_EQ(u.http.host_header(), "h:443");
  u = value_or_throw(parse_store_url("https://h:1/x"));
  EXPECT_EQ(u.http.port, 1);
  u = value_or_throw(parse_store_url("https://h:65535"));
  EXPECT_EQ(u.http.port, 65535);
}

TEST(StoreUrl, Ipv6Literals) {
  StoreUrl u = value_or_throw(parse_store_url("http://[::1]:8080/s"));
  EXPECT_EQ(u.http.host, "::1");
  EXPECT_EQ(u.http.port, 8080);
  EXPECT_EQ(u.http.host_header(), "[::1]:8080");
  EXPECT_EQ(u.http.origin(), "http://[::1]:8080");
  u = value_or_throw(parse_store_url("https://[2001:DB8::7]/"));
  EXPECT_EQ(u.http.host, "2001:db8::7");
  EXPECT_EQ(u.http.host_header(), "[2001:db8::7]");

  EXPECT_NE(url_error("http://::1:80/").find("brackets"), std::string::npos);
  url_error("http://[::1/");
  url_error("http://[zz::1]/");
  url_error("http://[]/");
  url_error("http://[::1]x/");
}

TEST(StoreUrl, BadPortsAndHosts) {
  for (std::string_view text : {"http://h:0/", "http://h:65536/", "http://h:/", "http://h:-1/",
                                "http://h:80a/", "http://h:999999/", "http://:80/", "http:///p",
                                "http://h%41/", "http://a/b%2"}) {
    url_error(text);
  }
  EXPECT_NE(url_error("http://h:70000/x").find("1-65535"), std::string::npos);
}

TEST(StoreUrl, UnknownSchemeNamesUrlAndListsSupported) {
  std::string m = url_error("gs://bucket/prefix");
  EXPECT_NE(m.find("gs://bucket/prefix"), std::string::npos) << m;
  EXPECT_NE(m.find("s3://"), std::string::npos) << m;
  EXPECT_NE(m.find("https://"), std::string::npos) << m;
  EXPECT_NE(url_error("ftp://h/x").find("'ftp://'"), std::string::npos);
}

TEST(StoreUrl, CredentialsQueriesAndFragmentsRejected) {
  for (std::string_view text :
       {"http://user:hunter2secret@host/p", "https://user:hunter2secret@[::1]:9000/p",
        "s3://AKID:hunter2secret@bucket/p"}) {
    std::string m = url_error(text);
    EXPECT_NE(m.find("credentials in the URL are not supported; use AWS_* variables or ~/.aws"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find("hunter2secret"), std::string::npos) << m;
  }
  // A '/' in a password ends the authority early; the port error must not show it either.
  std::string m = url_error("http://key:hunter2/secret@host/p");
  EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
  EXPECT_EQ(m.find("secret"), std::string::npos) << m;
  EXPECT_NE(m.find("http://***@host/p"), std::string::npos) << m;
  EXPECT_NE(m.find("credentials in the URL"), std::string::npos) << m;
  m = url_error("s3://AKID:hunter2/secret@bucket/p");
  EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
  EXPECT_NE(m.find("credentials in the URL"), std::string::npos) << m;
  // An '@' in a path is just a character.
  EXPECT_EQ(value_or_throw(parse_store_url("http://h:8080/a@b")).http.base_path, "/a@b");
  EXPECT_EQ(value_or_throw(parse_store_url("s3://bucket/a@b")).prefix, "a@b");
  EXPECT_NE(url_error("http://h/p?x=1").find("query"), std::string::npos);
  url_error("http://h/p#frag");
  url_error("s3://bucket/p?versionId=1");
  url_error("http://h/a b");
  url_error("http://h/a\tb");
}

TEST(StoreUrl, Endpoints) {
  Endpoint e = value_or_throw(parse_endpoint("http://127.0.0.1:7480"));
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 7480);
  EXPECT_EQ(e.base_path, "");
  e = value_or_throw(parse_endpoint("https://s3.eu-west-1.amazonaws.com/"));
  EXPECT_TRUE(e.https);
  EXPECT_EQ(e.port, 443);
  EXPECT_EQ(e.origin(), "https://s3.eu-west-1.amazonaws.com");
  e = value_or_throw(parse_endpoint("https://gw.example.com:8443/s3/"));
  EXPECT_EQ(e.base_path, "/s3");
  EXPECT_EQ(e.host_header(), "gw.example.com:8443");

  for (std::string_view text : {"", "localhost:9000", "s3://bucket", "ftp://h", "http://",
                                "http://u:p@h", "http://h?x", "http://h:0"}) {
    auto r = parse_endpoint(text);
    EXPECT_FALSE(r.ok()) << text;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, EINVAL);
      EXPECT_EQ(r.error().message.rfind("URL", 0), 0u) << r.error().message;
      EXPECT_EQ(r.error().message.find("u:p"), std::string::npos) << r.error().message;
    }
  }
}
