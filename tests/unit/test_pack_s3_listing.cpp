// The remote listing parsers on answers taken from real servers (Ceph RGW's ListObjectsV2, nginx's
// JSON autoindex) and on what a broken or hostile server might send; the tree building that the
// tar and remote sources share.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pack/pack_source.h"
#include "pack/s3_listing.h"

using fid::pack::SourceTreeBuilder;

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
  auto page = fid::pack::parse_list_objects_v2(body);
  return page ? "" : page.error().message;
}

}  // namespace

TEST(S3Listing, RgwAnswerWithEntitiesFolderMarkerAndUtf8) {
  auto page = fid::pack::parse_list_objects_v2(kRgwOddKeys);
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
  auto page = fid::pack::parse_list_objects_v2(kRgwTruncated);
  ASSERT_TRUE(page) << page.error().message;
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[1].size, 62602u);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "data/edge/jpeg/arithmetic.jpg");
}

TEST(S3Listing, AwsStyleAnswerWithOwnerCommentsCdataAndEmptyElements) {
  auto page = fid::pack::parse_list_objects_v2(listing(
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
  auto page = fid::pack::parse_list_objects_v2(listing("<Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"));
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
  EXPECT_EQ(fid::pack::decode_xml_text("&#65;&#x42;&#x1F600;&amp;amp;"), "AB\xF0\x9F\x98\x80&amp;");
  EXPECT_FALSE(fid::pack::decode_xml_text("&#xD800;"));
  EXPECT_FALSE(fid::pack::decode_xml_text("&#x110000;"));
  EXPECT_FALSE(fid::pack::decode_xml_text("a & b"));
  EXPECT_EQ(fid::pack::parse_iso8601_ns("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(fid::pack::parse_iso8601_ns("1970-01-01T00:00:01.000000001Z"), 1'000'000'001);
  EXPECT_EQ(fid::pack::parse_iso8601_ns("2000-02-29T00:00:00Z"), 951782400'000'000'000);
  EXPECT_FALSE(fid::pack::parse_iso8601_ns("2001-02-29T00:00:00Z"));
  EXPECT_FALSE(fid::pack::parse_iso8601_ns("2001-01-01T24:00:00Z"));
  EXPECT_FALSE(fid::pack::parse_iso8601_ns("2001-01-01T00:00:00"));  // no zone
  EXPECT_FALSE(fid::pack::parse_iso8601_ns("9999-01-01T00:00:00Z"));  // beyond int64 nanoseconds
  EXPECT_EQ(fid::pack::parse_http_date_ns("Thu, 01 Jan 1970 00:01:00 GMT"), 60'000'000'000);
  EXPECT_FALSE(fid::pack::parse_http_date_ns("Thu, 01 Foo 1970 00:01:00 GMT"));
}

TEST(AutoindexJson, NginxListing) {
  auto entries = fid::pack::parse_autoindex_json(
      "[\n{ \"name\":\"d0\", \"type\":\"directory\", \"mtime\":\"Wed, 25 Nov 2026 03:51:16 GMT\" },\n"
      "{ \"name\":\"with space \\u00e9.jpg\", \"type\":\"file\", \"mtime\":\"Wed, 25 Nov 2026 03:51:16 GMT\", \"size\":76168 },\n"
      "{ \"name\":\"sock\", \"type\":\"other\", \"mtime\":\"Wed, 25 Nov 2026 03:51:16 GMT\" }\n]\n");
  ASSERT_TRUE(entries) << entries.error().message;
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].type, fid::pack::AutoindexEntry::Type::dir);
  EXPECT_EQ((*entries)[1].name, "with space \xc3\xa9.jpg");
  EXPECT_EQ((*entries)[1].size, 76168u);
  EXPECT_EQ((*entries)[1].mtime_ns, *fid::pack::parse_http_date_ns("Wed, 25 Nov 2026 03:51:16 GMT"));
  EXPECT_EQ((*entries)[2].type, fid::pack::AutoindexEntry::Type::other);
  EXPECT_TRUE(fid::pack::parse_autoindex_json("[]"));
}

TEST(AutoindexJson, RefusesOtherShapes) {
  for (const char* bad : {"", "<html>Index of /</html>", "{}", "[1]", "[[]]", "[{\"name\":\"a\"}]",
                          "[{\"name\":\"a\",\"type\":\"file\"}]", "[{\"name\":\"a/b\",\"type\":\"directory\"}]",
                          "[{\"name\":\"\",\"type\":\"directory\"}]", "[{\"name\":\"a\",\"type\":\"file\",\"size\":-1}]",
                          "[{\"name\":\"a\",\"type\":\"file\",\"size\":1.5}]", "[{\"name\":\"a\",\"type\":\"file\",\"size\":1,\"x\":{}}]",
                          "[] []", "[{\"name\":\"a\\u0000\",\"type\":\"directory\"}]"})
    EXPECT_FALSE(fid::pack::parse_autoindex_json(bad)) << bad;
}

TEST(SourceTreeBuilder, FoldersBeforeChildrenAndRefusals) {
  SourceTreeBuilder b(7);
  ASSERT_TRUE(b.add_dir("", 9, 1));
  ASSERT_TRUE(b.add_file("a/b/c.jpg", 10, 1));
  ASSERT_TRUE(b.add_dir("a/d", 5, 1));
  ASSERT_TRUE(b.add_skipped("a/d/odd", "why", 1));
  ASSERT_TRUE(b.add_file(".fidelity/x", 1, 1));
  ASSERT_TRUE(b.add_file(std::string(256, 'n'), 1, 1));
  fid::pack::SourceTree t = b.take();
  ASSERT_EQ(t.dirs.size(), 4u);  // root, a, a/b, a/d
  EXPECT_EQ(t.dirs[0].mtime_ns, 9);
  EXPECT_EQ(t.dirs[2].rel, "a/b");
  EXPECT_EQ(t.dirs[3].mtime_ns, 5);
  ASSERT_EQ(t.files.size(), 1u);
  EXPECT_EQ(t.rel(0), "a/b/c.jpg");
  ASSERT_EQ(t.skipped.size(), 3u);  // a/d/odd, .fidelity, the long name

  SourceTreeBuilder dup(0);
  ASSERT_TRUE(dup.add_file("a", 1, 0));
  EXPECT_EQ(dup.add_file("a", 1, 0).error().code, EEXIST);
  SourceTreeBuilder both(0);
  ASSERT_TRUE(both.add_file("a", 1, 0));
  EXPECT_EQ(both.add_file("a/b", 1, 0).error().code, EEXIST);
  EXPECT_EQ(*fid::pack::normalize_source_path("./a//b/."), "a/b");
  EXPECT_FALSE(fid::pack::normalize_source_path("a/../b"));
  EXPECT_FALSE(fid::pack::normalize_source_path("/a"));
}

TEST(PathListing, SortsInWalkOrderStablyAndFindsPaths) {
  struct Info {
    uint32_t n;
  };
  fid::pack::PathListing<Info> l;
  // "a/b" sorts before "a-b" in walk order ('/' below every byte), after it bytewise.
  ASSERT_TRUE(l.add({0}, "a-b"));
  ASSERT_TRUE(l.add({1}, "a/b", "key of a/b"));
  ASSERT_TRUE(l.add({2}, "a-b", "second a-b"));
  ASSERT_TRUE(l.add({3}, "a"));
  EXPECT_FALSE(l.add({4}, std::string(4097, 'x')));
  EXPECT_FALSE(l.add({5}, "ok", std::string(4097, 'x')));
  ASSERT_EQ(l.size(), 4u);
  l.sort();
  std::vector<uint32_t> order;
  for (size_t k = 0; k < l.size(); ++k) order.push_back(l[k].info.n);
  EXPECT_EQ(order, (std::vector<uint32_t>{3, 1, 0, 2}));
  EXPECT_EQ(l[1].path, "a/b");
  EXPECT_EQ(l[1].extra, "key of a/b");
  EXPECT_EQ(l[2].extra, "");
  EXPECT_EQ(l[3].extra, "second a-b");
  EXPECT_EQ(l.lower_bound("a-b"), 2u);
  EXPECT_EQ(l.lower_bound("a/a"), 1u);
  EXPECT_EQ(l.lower_bound("b"), 4u);

  // Entries span many pool chunks (64 KiB each) and stay intact.
  fid::pack::PathListing<Info> big;
  const std::string name(3000, 'n');
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_TRUE(big.add({i}, name + std::to_string(1000 + 999 - i), name));
  big.sort();
  for (size_t k = 0; k < big.size(); ++k) {
    EXPECT_EQ(big[k].info.n, 999 - k);
    EXPECT_TRUE(big[k].extra == name) << k;
  }
  // drain() hands out every entry in order (chunks are given back behind it), stops at the
  // first error, and leaves the listing empty.
  uint32_t next = 999;
  EXPECT_TRUE(big.drain([&](const fid::pack::PathListing<Info>::Entry& e) -> fid::Status {
    EXPECT_EQ(e.info.n, next--);
    EXPECT_TRUE(e.path == name + std::to_string(1999 - e.info.n)) << e.info.n;
    return {};
  }));
  EXPECT_EQ(next, UINT32_MAX);
  EXPECT_EQ(big.size(), 0u);
  int seen = 0;
  fid::Status stopped = l.drain([&](const fid::pack::PathListing<Info>::Entry& e) -> fid::Status {
    ++seen;
    if (e.path == "a/b") return fid::Error{EEXIST, "stop"};
    return {};
  });
  EXPECT_EQ(stopped.error().code, EEXIST);
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(l.size(), 0u);
}
