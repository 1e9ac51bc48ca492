// AWS settings from an injected environment and temporary files; the real environment and
// $HOME are never read (HOME always points into the test's own folder).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "net/aws_config.h"
#include "test_result.h"

using namespace fid::net;
using fid::Result;
using fid::testutil::value_or_throw;

namespace {

constexpr const char* kSecret = "s3cr3t/VALUE+never-in-messages";

class AwsConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "fid_aws_config_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    // An empty home: no ~/.aws unless a test writes one.
    env_["HOME"] = (dir_ / "home").string();
    std::filesystem::create_directories(dir_ / "home");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::filesystem::path p = dir_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  void set(const std::string& name, const std::string& value) { env_[name] = value; }

  Result<S3Target> resolve(const S3Options& opts = {}, std::string_view url = "s3://bucket/p") {
    StoreUrl u = value_or_throw(parse_store_url(url));
    return resolve_s3(u, opts, [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    });
  }
  std::string error_of(const S3Options& opts = {}, std::string_view url = "s3://bucket/p") {
    auto r = resolve(opts, url);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return "";
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_EQ(r.error().message.find(kSecret), std::string::npos) << r.error().message;
    return r.error().message;
  }

  std::filesystem::path dir_;
  std::map<std::string, std::string> env_;
};

}  // namespace

TEST(AwsConfigIni, ParsesSectionsKeysAndNestedBlocks) {
  auto ini = parse_aws_ini(
      "# comment\n"
      "orphan = ignored\n"
      "[default]\r\n"
      "aws_access_key_id = AKID  \r\n"
      "AWS_Secret_Access_Key=with=equals\n"
      "; another comment\n"
      "not a key line\n"
      "[profile  dev ]\n"
      "region = eu-west-1\n"
      "s3 =\n"
      "  addressing_style = path\n"
      "\tendpoint_url = http://x\n"
      "after = top\n"
      "  indented = not nested\n"
      "[unterminated\n"
      "lost = 1\n"
      "[]\n"
      "[profile]\n"
      "p = 1\n");
  ASSERT_EQ(ini.count("default"), 1u);
  EXPECT_EQ(ini["default"]["aws_access_key_id"], "AKID");
  EXPECT_EQ(ini["default"]["aws_secret_access_key"], "with=equals");
  EXPECT_EQ(ini["default"].size(), 2u);
  ASSERT_EQ(ini.count("dev"), 1u);
  EXPECT_EQ(ini["dev"]["region"], "eu-west-1");
  EXPECT_EQ(ini["dev"]["s3.addressing_style"], "path");
  EXPECT_EQ(ini["dev"]["s3.endpoint_url"], "http://x");
  EXPECT_EQ(ini["dev"]["after"], "top");
  EXPECT_EQ(ini["dev"]["indented"], "not nested");
  EXPECT_EQ(ini.count("unterminated"), 0u);
  EXPECT_EQ(ini["profile"]["p"], "1");  // "[profile]" alone is a section named "profile"
}

TEST_F(AwsConfig, NothingConfiguredIsAnonymousInUsEast1) {
  S3Target t = value_or_throw(resolve());
  EXPECT_TRUE(t.credentials.anonymous());
  EXPECT_EQ(t.credentials_from, "none");
  EXPECT_EQ(t.region, "us-east-1");
  EXPECT_EQ(t.endpoint.origin(), "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(t.path_style);  // AWS endpoint, bucket without dots

  env_.erase("HOME");  // no HOME at all is no files, not an error
  t = value_or_throw(resolve());
  EXPECT_EQ(t.credentials_from, "none");
}

TEST_F(AwsConfig, EnvironmentCredentials) {
  set("AWS_ACCESS_KEY_ID", "AKIDENV");
  set("AWS_SECRET_ACCESS_KEY", kSecret);
  set("AWS_SESSION_TOKEN", "tok");
  // The environment wins over the credentials file.
  write("home/.aws/credentials", "[default]\naws_access_key_id=AKIDFILE\naws_secret_access_key=x\n");
  S3Target t = value_or_throw(resolve());
  EXPECT_EQ(t.credentials.access_key_id, "AKIDENV");
  EXPECT_EQ(t.credentials.secret_access_key, kSecret);
  EXPECT_EQ(t.credentials.session_token, "tok");
  EXPECT_EQ(t.credentials_from, "environment");
}

TEST_F(AwsConfig, OnlyOneEnvironmentKeyIsAnErrorNamingTheOther) {
  set("AWS_SECRET_ACCESS_KEY", kSecret);
  std::string m = error_of();
  EXPECT_NE(m.find("AWS_ACCESS_KEY_ID"), std::string::npos) << m;

  env_.erase("AWS_SECRET_ACCESS_KEY");
  set("AWS_ACCESS_KEY_ID", "AKID");
  m = error_of();
  EXPECT_NE(m.find("AWS_SECRET_ACCESS_KEY is not"), std::string::npos) << m;

  set("AWS_SECRET_ACCESS_KEY", "");  // empty counts as unset
  error_of();
}

TEST_F(AwsConfig, ProfileFromFilesAndPrecedence) {
  std::string creds = write("creds.ini",
                            "[default]\naws_access_key_id = AKIDDEF\naws_secret_access_key = d\n"
                            "[work]\naws_access_key_id = AKIDWORK\naws_secret_access_key = " +
                                std::string(kSecret) + "\naws_session_token = wtok\n");
  std::string config = write("config.ini",
                             "[default]\nregion = ap-south-1\n"
                             "[profile work]\nregion = eu-central-1\n"
                             "endpoint_url = http://127.0.0.1:7480\n");
  set("AWS_SHARED_CREDENTIALS_FILE", creds);
  set("AWS_CONFIG_FILE", config);

  S3Target t = value_or_throw(resolve());
  EXPECT_EQ(t.credentials.access_key_id, "AKIDDEF");
  EXPECT_EQ(t.credentials_from, "profile default in " + creds);
  EXPECT_EQ(t.region, "ap-south-1");
  EXPECT_EQ(t.endpoint.origin(), "https://s3.ap-south-1.amazonaws.com");

  set("AWS_PROFILE", "work");
  t = value_or_throw(resolve());
  EXPECT_EQ(t.credentials.access_key_id, "AKIDWORK");
  EXPECT_EQ(t.credentials.secret_access_key, kSecret);
  EXPECT_EQ(t.credentials.session_token, "wtok");
  EXPECT_EQ(t.region, "eu-central-1");
  EXPECT_EQ(t.endpoint.origin(), "http://127.0.0.1:7480");
  EXPECT_TRUE(t.path_style);  // not AWS: path style

  // -o profile= wins over AWS_PROFILE.
  S3Options opts;
  opts.profile = "default";
  t = value_or_throw(resolve(opts));
  EXPECT_EQ(t.credentials.access_key_id, "AKIDDEF");
}

TEST_F(AwsConfig, DefaultFilesUnderHome) {
  write("home/.aws/credentials", "[default]\naws_access_key_id=AKIDHOME\naws_secret_access_key=h\n");
  write("home/.aws/config", "[default]\nregion=us-west-2\n");
  S3Target t = value_or_throw(resolve());
  EXPECT_EQ(t.credentials.access_key_id, "AKIDHOME");
  EXPECT_EQ(t.credentials_from,
            "profile default in " + (dir_ / "home/.aws/credentials").string());
  EXPECT_EQ(t.region, "us-west-2");
}

TEST_F(AwsConfig, CredentialsInTheConfigFile) {
  set("AWS_CONFIG_FILE",
      write("config", "[profile cfg]\naws_access_key_id=AKIDCFG\naws_secret_access_key=c\n"));
  set("AWS_PROFILE", "cfg");
  S3Target t = value_or_throw(resolve());
  EXPECT_EQ(t.credentials.access_key_id, "AKIDCFG");
}

TEST_F(AwsConfig, ExplicitProfileMissingEverywhere) {
  std::string creds = write("creds", "[default]\naws_access_key_id=A\naws_secret_access_key=B\n");
  set("AWS_SHARED_CREDENTIALS_FILE", creds);
  set("AWS_PROFILE", "nope");
  std::string m = error_of();
  EXPECT_NE(m.find("'nope'"), std::string::npos) << m;
  EXPECT_NE(m.find("AWS_PROFILE"), std::string::npos) << m;
  EXPECT_NE(m.find(creds), std::string::npos) << m;
  EXPECT_NE(m.find((dir_ / "home/.aws/config").string() + " (missing)"), std::string::npos) << m;

  S3Options opts;
  opts.profile = "also-nope";
  m = error_of(opts);
  EXPECT_NE(m.find("'also-nope'"), std::string::npos) << m;
  EXPECT_NE(m.find("-o profile"), std::string::npos) << m;
}

TEST_F(AwsConfig, HalfAProfileIsAnErrorWithoutTheSecret) {
  std::string creds = write("creds", "[default]\naws_secret_access_key=" + std::string(kSecret) + "\n");
  set("AWS_SHARED_CREDENTIALS_FILE", creds);
  std::string m = error_of();
  EXPECT_NE(m.find("no aws_access_key_id"), std::string::npos) << m;
  EXPECT_NE(m.find(creds), std::string::npos) << m;
}

TEST_F(AwsConfig, UnsupportedCredentialSourcesAreNamed) {
  set("AWS_CONFIG_FILE", write("config", "[profile sso]\nsso_session = corp\nregion = us-east-2\n"));
  set("AWS_PROFILE", "sso");
  std::string m = error_of();
  EXPECT_NE(m.find("sso_session"), std::string::npos) << m;
  EXPECT_NE(m.find("AWS_ACCESS_KEY_ID"), std::string::npos) << m;
  // Credentials in the environment make the profile's own way irrelevant.
  set("AWS_ACCESS_KEY_ID", "A");
  set("AWS_SECRET_ACCESS_KEY", "B");
  EXPECT_EQ(value_or_throw(resolve()).region, "us-east-2");
}

TEST_F(AwsConfig, RegionPrecedence) {
  set("AWS_CONFIG_FILE", write("config", "[default]\nregion = from-profile\n"));
  EXPECT_EQ(value_or_throw(resolve()).region, "from-profile");
  set("AWS_DEFAULT_REGION", "from-default-region");
  EXPECT_EQ(value_or_throw(resolve()).region, "from-default-region");
  set("AWS_REGION", "from-region");
  EXPECT_EQ(value_or_throw(resolve()).region, "from-region");
  S3Options opts;
  opts.region = "from-option";
  S3Target t = value_or_throw(resolve(opts));
  EXPECT_EQ(t.region, "from-option");
  EXPECT_EQ(t.endpoint.host, "s3.from-option.amazonaws.com");

  opts.region = "evil.example.com/";
  std::string m = error_of(opts);
  EXPECT_NE(m.find("-o region"), std::string::npos) << m;
}

TEST_F(AwsConfig, EndpointPrecedence) {
  set("AWS_CONFIG_FILE", write("config", "[default]\nendpoint_url = http://profile:1\n"));
  EXPECT_EQ(value_or_throw(resolve()).endpoint.origin(), "http://profile:1");
  set("AWS_ENDPOINT_URL", "http://generic:2");
  EXPECT_EQ(value_or_throw(resolve()).endpoint.origin(), "http://generic:2");
  set("AWS_ENDPOINT_URL_S3", "https://s3only:3/base/");
  S3Target t = value_or_throw(resolve());
  EXPECT_EQ(t.endpoint.origin(), "https://s3only:3");
  EXPECT_EQ(t.endpoint.base_path, "/base");
  S3Options opts;
  opts.endpoint = "http://[::1]:7480";
  EXPECT_EQ(value_or_throw(resolve(opts)).endpoint.origin(), "http://[::1]:7480");

  opts.endpoint = "http://key:" + std::string(kSecret) + "@host/";
  std::string m = error_of(opts);
  EXPECT_NE(m.find("-o endpoint"), std::string::npos) << m;
  opts.endpoint = "localhost:9000";
  m = error_of(opts);
  EXPECT_NE(m.find("localhost:9000"), std::string::npos) << m;
}

TEST_F(AwsConfig, Addressing) {
  // AWS endpoint: virtual-hosted unless the bucket has dots.
  EXPECT_FALSE(value_or_throw(resolve({}, "s3://plain-bucket/p")).path_style);
  EXPECT_TRUE(value_or_throw(resolve({}, "s3://dotted.bucket/p")).path_style);
  // Any other endpoint: path style.
  S3Options opts;
  opts.endpoint = "https://storage.example.com";
  EXPECT_TRUE(value_or_throw(resolve(opts)).path_style);
  // Explicit choices win.
  opts.addressing = Addressing::virtual_host;
  EXPECT_FALSE(value_or_throw(resolve(opts)).path_style);
  opts = {};
  opts.addressing = Addressing::path;
  EXPECT_TRUE(value_or_throw(resolve(opts)).path_style);
  // The profile's s3 addressing_style, below an explicit option.
  set("AWS_CONFIG_FILE", write("config", "[default]\ns3 =\n  addressing_style = path\n"));
  EXPECT_TRUE(value_or_throw(resolve()).path_style);
  opts.addressing = Addressing::virtual_host;
  EXPECT_FALSE(value_or_throw(resolve(opts)).path_style);
  set("AWS_CONFIG_FILE", write("config2", "[default]\ns3 =\n  addressing_style = sideways\n"));
  EXPECT_NE(error_of().find("sideways"), std::string::npos);
}

TEST_F(AwsConfig, UnreadableFileAndNonS3Url) {
  std::filesystem::create_directories(dir_ / "a-directory");
  set("AWS_SHARED_CREDENTIALS_FILE", (dir_ / "a-directory").string());
  auto r = resolve();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EISDIR);
  EXPECT_NE(r.error().message.find("a-directory"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("AWS_SHARED_CREDENTIALS_FILE"), std::string::npos);
  env_.erase("AWS_SHARED_CREDENTIALS_FILE");
  StoreUrl local = value_or_throw(parse_store_url("/data/store"));
  EXPECT_FALSE(resolve_s3(local, {}, [](const char*) -> const char* { return nullptr; }).ok());
}
