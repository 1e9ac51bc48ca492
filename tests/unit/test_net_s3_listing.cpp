// The remote listing parsers on answers taken from real servers (Ceph RGW's ListObjectsV2, nginx's
// JSON autoindex) and on what a broken or hostile server might send.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/s3_listing.h"

namespace {

// RGW's answer to GET /src/?list-type=2&prefix=odd/ (keys with XML's special characters, a
// folder marker and UTF-8), as captured from the test server.
const std::string kRgwOddKeys =
    R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
    R"(<Name>src</Name><Prefix>odd/</Prefix><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>)"
    R"(<Contents><Key>odd/a+b &amp;&lt;&gt;&quot;&apos;.txt</Key><LastModified>2026-11-25T03:51:57.316Z</LastModified>)"
    R"(<ETag>&quot;764efa883dda1e11db47671c4a3bbd9e&quot;</ETag><Size>3</Size><StorageClass>STANDARD</StorageClass>)"
    R"(<Type>Normal</Type></Contents><Contents><Key>odd/folder/</Key><LastModified>2026-11-25T03:51:59.816Z</LastModified>)"
    R"(<ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>0</Size><StorageClass>STANDARD</StorageClass>)"
    R"(<Type>Normal</Type></Contents><Contents><Key>odd/ü ñ 日本.bin</Key><LastModified>2026-11-25T03:51:57.310Z</LastModified>)"
    R"(<ETag>&quot;9dd4e461268c8034f5c8564e155c67a6&quot;</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass>)"
    R"(<Type>Normal</Type></Contents><KeyCount>3</KeyCount></ListBucketResult>)";

// RGW's first page of GET /src/?list-type=2&max-keys=2&prefix=data/edge/jpeg/.
const std::string kRgwTruncated =
    R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
    R"(<Name>src</Name><Prefix>data/edge/jpeg/</Prefix><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated><Contents>)"
    R"(<Key>data/edge/jpeg/already_progressive.jpg</Key><LastModified>2026-11-25T03:51:49.037Z</LastModified>)"
    R"(<ETag>&quot;c79fcefd174cd3b18357d6dcdbe76113&quot;</ETag><Size>69777</Size><StorageClass>STANDARD</StorageClass>)"
    R"(<Type>Normal</Type></Contents><Contents><Key>data/edge/jpeg/arithmetic.jpg</Key><LastModified>2026-11-25T03:51:49.038Z</LastModified>)"
    R"(<ETag>&quot;53fa69b46ec89f40ce88886fc487f909&quot;</ETag><Size>62602</Size><StorageClass>STANDARD</StorageClass>)"
    R"(<Type>Normal</Type></Contents><NextContinuationToken>data/edge/jpeg/arithmetic.jpg</NextContinuationToken>)"
    R"(<KeyCount>2</KeyCount></ListBucketResult>)";

std::string listing(const std::string& inner) {
  return "<?xml version=\"1.0\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n" + inner +
         "\n</ListBucketResult>\n";
}

std::string error_of(const std::string& body) {
  auto page = fid::net::parse_list_objects_v2(body);
  return page ? "" : page.error().message;
}

}  // namespace

TEST(S3Listing, RgwAnswerWithEntitiesFolderMarkerAndUtf8) {
  auto page = fid::net::parse_list_objects_v2(kRgwOddKeys);
  ASSERT_TRUE(page) << page.error().message;
  ASSERT_EQ(page->objects.size(), 3u);
  EXPECT_EQ(page->objects[0].key, "odd/a+b &<>\"'.txt");
  EXPECT_EQ(page->objects[0].size, 3u);
  EXPECT_EQ(page->objects[0].mtime_ns, 1795578717316000000);
  EXPECT_EQ(page->objects[1].key, "odd/folder/");
  EXPECT_EQ(page->objects[2].key, "odd/\xc3\xbc \xc3\xb1 \xe6\x97\xa5\xe6\x9c\xac.bin");
  EXPECT_FALSE(page->truncated);
  EXPECT_EQ(page->key_count, 3u);
}

TEST(S3Listing, RgwTruncatedPageHasItsToken) {
  auto page = fid::net::parse_list_objects_v2(kRgwTruncated);
  ASSERT_TRUE(page) << page.error().message;
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[1].size, 62602u);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "data/edge/jpeg/arithmetic.jpg");
}

TEST(S3Listing, AwsStyleAnswerWithOwnerCommentsCdataAndEmptyElements) {
  auto page = fid::net::parse_list_objects_v2(listing(
      "<!-- a comment with <Contents> in it -->\n  <Name>b</Name><Prefix/>\n"
      "  <Contents>\n    <Key><![CDATA[a/<raw> & more]]></Key>\n    <LastModified>2009-10-12T17:50:30.5+02:00</LastModified>\n"
      "    <Size>0</Size>\n    <Owner><ID>x</ID><DisplayName>y</DisplayName></Owner>\n  </Contents>\n"
      "  <CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes>\n  <KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>\n"
      "  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"));
  ASSERT_TRUE(page) << page.error().message;
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "a/<raw> & more");
  EXPECT_EQ(page->objects[0].mtime_ns, 1255362630500000000);  // 15:50:30.5 UTC
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(S3Listing, EmptyListing) {
  auto page = fid::net::parse_list_objects_v2(listing("<Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"));
  ASSERT_TRUE(page) << page.error().message;
  EXPECT_TRUE(page->objects.empty());
}

TEST(S3Listing, RefusesWhatItDoesNotUnderstand) {
  EXPECT_NE(error_of(""), "");
  EXPECT_NE(error_of("<Error><Code>AccessDenied</Code></Error>"), "");
  EXPECT_NE(error_of(listing("<Contents><Key>a</Key></Contents>")), "");                 // no Size
  EXPECT_NE(error_of(listing("<Contents><Size>1</Size></Contents>")), "");               // no Key
  EXPECT_NE(error_of(listing("<Contents><Key>a</Key><Size>-1</Size></Contents>")), "");
  EXPECT_NE(error_of(listing("<Contents><Key>a</Key><Size>99999999999999999999</Size></Contents>")), "");
  EXPECT_NE(error_of(listing("<Contents><Key>a&bogus;</Key><Size>1</Size></Contents>")), "");
  EXPECT_NE(error_of(listing("<Contents><Key>a&#0;</Key><Size>1</Size></Contents>")), "");
  EXPECT_NE(error_of(listing("<Contents><Key>a</Key><Size>1</Size><LastModified>yesterday</LastModified></Contents>")), "");
  EXPECT_NE(error_of(listing("<Contents><Key>a</Size></Contents>")), "");               // mismatched tags
  EXPECT_NE(error_of(listing("<IsTruncated>true</IsTruncated>")), "");                    // no token
  EXPECT_NE(error_of(listing("<KeyCount>2</KeyCount><Contents><Key>a</Key><Size>1</Size></Contents>")), "");
  EXPECT_NE(error_of("<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY e \"boom\">]><ListBucketResult/>"), "");
  EXPECT_NE(error_of("<ListBucketResult><Contents><Key>a"), "");                         // cut short
  EXPECT_NE(error_of("<ListBucketResult></ListBucketResult><ListBucketResult></ListBucketResult>"), "");
  std::string deep = "<ListBucketResult>";
  for (int i = 0; i < 100; ++i) deep += "<a>";
  EXPECT_NE(error_of(deep), "");
}

TEST(S3Listing, XmlTextAndTimes) {
  EXPECT_EQ(fid::net::decode_xml_text("&#65;&#x42;&#x1F600;&amp;amp;"), "AB\xF0\x9F\x98\x80&amp;");
  EXPECT_FALSE(fid::net::decode_xml_text("&#xD800;"));
  EXPECT_FALSE(fid::net::decode_xml_text("&#x110000;"));
  EXPECT_FALSE(fid::net::decode_xml_text("a & b"));
  EXPECT_EQ(fid::net::parse_iso8601_ns("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(fid::net::parse_iso8601_ns("1970-01-01T00:00:01.000000001Z"), 1'000'000'001);
  EXPECT_EQ(fid::net::parse_iso8601_ns("2000-02-29T00:00:00Z"), 951782400'000'000'000);
  EXPECT_FALSE(fid::net::parse_iso8601_ns("2001-02-29T00:00:00Z"));
  EXPECT_FALSE(fid::net::parse_iso8601_ns("2001-01-01T24:00:00Z"));
  EXPECT_FALSE(fid::net::parse_iso8601_ns("2001-01-01T00:00:00"));  // no zone
  EXPECT_FALSE(fid::net::parse_iso8601_ns("9999-01-01T00:00:00Z"));  // beyond int64 nanoseconds
  EXPECT_EQ(fid::net::parse_http_date_ns("Thu, 01 Jan 1970 00:01:00 GMT"), 60'000'000'000);
  EXPECT_FALSE(fid::net::parse_http_date_ns("Thu, 01 Foo 1970 00:01:00 GMT"));
}

TEST(AutoindexJson, NginxListing) {
  auto entries = fid::net::parse_autoindex_json(
      "[\n{ \"name\":\"d0\", \"type\":\"directory\", \"mtime\":\"Wed, 25 Nov 2026 03:51:16 GMT\" },\n"
      "{ \"name\":\"with space \\u00e9.jpg\", \"type\":\"file\", \"mtime\":\"Wed, 25 Nov 2026 03:51:16 GMT\", \"size\":76168 },\n"
      "{ \"name\":\"sock\", \"type\":\"other\", \"mtime\":\"Wed, 25 Nov 2026 03:51:16 GMT\" }\n]\n");
  ASSERT_TRUE(entries) << entries.error().message;
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].type, fid::net::AutoindexEntry::Type::dir);
  EXPECT_EQ((*entries)[1].name, "with space \xc3\xa9.jpg");
  EXPECT_EQ((*entries)[1].size, 76168u);
  EXPECT_EQ((*entries)[1].mtime_ns, *fid::net::parse_http_date_ns("Wed, 25 Nov 2026 03:51:16 GMT"));
  EXPECT_EQ((*entries)[2].type, fid::net::AutoindexEntry::Type::other);
  EXPECT_TRUE(fid::net::parse_autoindex_json("[]"));
}

TEST(AutoindexJson, RefusesOtherShapes) {
  for (const char* bad : {"", "<html>Index of /</html>", "{}", "[1]", "[[]]", "[{\"name\":\"a\"}]",
                          "[{\"name\":\"a\",\"type\":\"file\"}]", "[{\"name\":\"a/b\",\"type\":\"directory\"}]",
                          "[{\"name\":\"\",\"type\":\"directory\"}]", "[{\"name\":\"a\",\"type\":\"file\",\"size\":-1}]",
                          "[{\"name\":\"a\",\"type\":\"file\",\"size\":1.5}]", "[{\"name\":\"a\",\"type\":\"file\",\"size\":1,\"x\":{}}]",
                          "[] []", "[{\"name\":\"a\\u0000\",\"type\":\"directory\"}]"})
    EXPECT_FALSE(fid::net::parse_autoindex_json(bad)) << bad;
}
