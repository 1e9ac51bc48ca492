#include "net/aws_config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/ascii.h"

namespace fid::net {
namespace {

constexpr std::string_view kWhitespace = " \t\r\f\v";

std::string_view trim(std::string_view s) {
  size_t begin = s.find_first_not_of(kWhitespace);
  if (begin == std::string_view::npos) return {};
  size_t end = s.find_last_not_of(kWhitespace);
  return s.substr(begin, end - begin + 1);
}

// The environment, with an empty variable counting as unset (as AWS's tools treat it).
class Env {
 public:
  explicit Env(const std::function<const char*(const char*)>& getenv) : getenv_(getenv) {}
  std::optional<std::string> get(const char* name) const {
    const char* value = getenv_ ? getenv_(name) : std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  }

 private:
  const std::function<const char*(const char*)>& getenv_;
};

// One AWS ini file, read whole. A file that does not exist is an empty one: the files are
// optional. `path` is "" when there is no path to look at (no $HOME).
struct IniFile {
  std::string path;
  bool exists = false;
  std::map<std::string, IniSection> sections;

  const IniSection* section(const std::string& name) const {
    auto it = sections.find(name);
    return it == sections.end() ? nullptr : &it->second;
  }
};

Result<IniFile> read_ini(std::string path, std::string_view setting) {
  IniFile file;
  file.path = std::move(path);
  if (file.path.empty()) return file;
  auto cannot_read = [&](int err, std::string_view why) {
    return Error{err, "AWS settings: cannot read " + file.path + " (" + std::string(setting) +
                          "): " + std::string(why)};
  };
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(file.path, ec);
  if (status.type() == std::filesystem::file_type::not_found) return file;
  if (status.type() == std::filesystem::file_type::directory) {
    return cannot_read(EISDIR, "it is a directory");
  }
  std::ifstream in(file.path, std::ios::binary);
  if (!in) {
    int err = errno ? errno : EIO;
    return cannot_read(err, std::strerror(err));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return cannot_read(EIO, "read error");
  file.exists = true;
  file.sections = parse_aws_ini(text.str());
  return file;
}

std::optional<std::string> key(const IniSection* section, const std::string& name) {
  if (section == nullptr) return std::nullopt;
  auto it = section->find(name);
  if (it == section->end() || it->second.empty()) return std::nullopt;
  return it->second;
}

// Ways to get credentials that only AWS's SDKs implement; a profile that uses one of them
// would otherwise look like "no credentials" and every request would fail as anonymous.
constexpr const char* kUnsupportedCredentialKeys[] = {
    "role_arn", "credential_process", "sso_session", "sso_start_url", "web_identity_token_file",
    "credential_source"};

// Access key id and secret from one section; `where` is "profile NAME in FILE". Messages name
// keys, never their values.
Result<std::optional<Credentials>> credentials_in(const IniSection* section,
                                                  const std::string& where) {
  auto id = key(section, "aws_access_key_id");
  auto secret = key(section, "aws_secret_access_key");
  if (id && secret) {
    Credentials c;
    c.access_key_id = *id;
    c.secret_access_key = *secret;
    c.session_token = key(section, "aws_session_token").value_or("");
    return std::optional<Credentials>(std::move(c));
  }
  if (id || secret) {
    return Error{EINVAL, "AWS settings: " + where + " has " +
                             (id ? "aws_access_key_id but no aws_secret_access_key"
                                 : "aws_secret_access_key but no aws_access_key_id")};
  }
  for (const char* unsupported : kUnsupportedCredentialKeys) {
    if (key(section, unsupported)) {
      return Error{EINVAL, "AWS settings: " + where + " gets its credentials with " +
                               unsupported +
                               ", which fidelityfs does not support; give aws_access_key_id and "
                               "aws_secret_access_key, or AWS_ACCESS_KEY_ID, "
                               "AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (e.g. from `aws "
                               "configure export-credentials --format env`)"};
    }
  }
  return std::optional<Credentials>();
}

bool valid_region(std::string_view region) {
  if (region.empty() || region.size() > 64) return false;
  for (char c : region) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-';
    if (!ok) return false;
  }
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What the settings are resolved from: the environment, the profile and the two files.
struct Sources {
  explicit Sources(Env e) : env(std::move(e)) {}
  Env env;
  std::string profile = "default";
  std::string profile_setting;  // what named the profile; "" for the default one nobody asked for
  IniFile credentials, config;

  const IniSection* config_section() const { return config.section(profile); }
  // "profile NAME in FILE": where a setting came from, for messages.
  std::string profile_in(const IniFile& f) const { return "profile " + profile + " in " + f.path; }
};

// The profile (-o profile= wins over AWS_PROFILE) and both files (AWS_*_FILE, else under
// HOME). A profile someone asked for must be in one of them.
Result<Sources> read_sources(const S3Options& opts, Env env) {
  Sources src(std::move(env));
  if (!opts.profile.empty()) {
    src.profile = opts.profile;
    src.profile_setting = "-o profile";
  } else if (auto p = src.env.get("AWS_PROFILE")) {
    src.profile = *p;
    src.profile_setting = "AWS_PROFILE";
  }
  const std::optional<std::string> home = src.env.get("HOME");
  const auto read = [&](const char* variable, const char* under_home, const char* default_setting) -> Result<IniFile> {
    if (auto p = src.env.get(variable)) return read_ini(*p, variable);
    if (home) return read_ini(*home + under_home, default_setting);
    return read_ini("", variable);
  };
  Result<IniFile> credentials = read("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials", "the default credentials file");
  if (!credentials) return std::move(credentials).error();
  Result<IniFile> config = read("AWS_CONFIG_FILE", "/.aws/config", "the default config file");
  if (!config) return std::move(config).error();
  src.credentials = std::move(credentials).value();
  src.config = std::move(config).value();
  if (src.profile_setting.empty() || src.credentials.section(src.profile) || src.config.section(src.profile)) return src;
  std::string looked_in;
  for (const IniFile* f : {&src.credentials, &src.config}) {
    if (f->path.empty()) continue;
    if (!looked_in.empty()) looked_in += " and ";
    looked_in += f->path + (f->exists ? "" : " (missing)");
  }
  if (looked_in.empty()) looked_in = "no files (neither HOME nor AWS_*_FILE is set)";
  return Error{EINVAL, "AWS settings: profile '" + src.profile + "' (" + src.profile_setting + ") is not in " + looked_in};
}

// Credentials: the environment, else the profile in the credentials file, else in the config
// file, else none (anonymous requests, for public buckets).
Status resolve_credentials(const Sources& src, S3Target& target) {
  auto env_id = src.env.get("AWS_ACCESS_KEY_ID");
  auto env_secret = src.env.get("AWS_SECRET_ACCESS_KEY");
  if (env_id && env_secret) {
    target.credentials.access_key_id = *env_id;
    target.credentials.secret_access_key = *env_secret;
    target.credentials.session_token = src.env.get("AWS_SESSION_TOKEN").value_or("");
    target.credentials_from = "environment";
    return {};
  }
  if (env_id || env_secret) {
    return Error{EINVAL, std::string("AWS settings: ") +
                             (env_id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                                     : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not") +
                             "; set both, or neither to use ~/.aws"};
  }
  target.credentials_from = "none";
  for (const IniFile* f : {&src.credentials, &src.config}) {
    std::string where = src.profile_in(*f);
    auto found = credentials_in(f->section(src.profile), where);
    if (!found) return std::move(found).error();
    if (*found) {
      target.credentials = std::move(**found);
      target.credentials_from = std::move(where);
      break;
    }
  }
  return {};
}

// Region: explicit option, environment, profile, us-east-1.
Status resolve_region(const S3Options& opts, const Sources& src, S3Target& target) {
  std::string region_setting = "the default";
  target.region = "us-east-1";
  if (!opts.region.empty()) {
    target.region = opts.region;
    region_setting = "-o region";
  } else if (auto r = src.env.get("AWS_REGION")) {
    target.region = *r;
    region_setting = "AWS_REGION";
  } else if (auto r2 = src.env.get("AWS_DEFAULT_REGION")) {
    target.region = *r2;
    region_setting = "AWS_DEFAULT_REGION";
  } else if (auto r3 = key(src.config_section(), "region")) {
    target.region = *r3;
    region_setting = "region of " + src.profile_in(src.config);
  }
  // The region goes into the default endpoint's host name and into every signature.
  if (!valid_region(target.region)) {
    return Error{EINVAL, "AWS settings: region '" + target.region + "' (" + region_setting +
                             ") is not letters, digits and '-'"};
  }
  return {};
}

// Endpoint: explicit option, environment (S3's own first), profile, AWS's regional one.
Status resolve_endpoint(const S3Options& opts, const Sources& src, S3Target& target) {
  std::string endpoint_text = "https://s3." + target.region + ".amazonaws.com";
  std::string endpoint_setting = "the default endpoint";
  if (!opts.endpoint.empty()) {
    endpoint_text = opts.endpoint;
    endpoint_setting = "-o endpoint";
  } else if (auto e = src.env.get("AWS_ENDPOINT_URL_S3")) {
    endpoint_text = *e;
    endpoint_setting = "AWS_ENDPOINT_URL_S3";
  } else if (auto e2 = src.env.get("AWS_ENDPOINT_URL")) {
    endpoint_text = *e2;
    endpoint_setting = "AWS_ENDPOINT_URL";
  } else if (auto e3 = key(src.config_section(), "endpoint_url")) {
    endpoint_text = *e3;
    endpoint_setting = "endpoint_url of " + src.profile_in(src.config);
  }
  Result<Endpoint> endpoint = parse_endpoint(endpoint_text);
  if (!endpoint) {
    return Error{EINVAL, "AWS settings: " + endpoint_setting + ": " + endpoint.error().message};
  }
  target.endpoint = std::move(endpoint).value();
  return {};
}

// Addressing: explicit option, the profile's s3.addressing_style, else decided here. Other
// servers (Ceph, MinIO, ...) are usually reached by address or by a name without per-bucket
// DNS; a bucket with dots breaks the TLS wildcard certificate of AWS's hosts.
Result<Addressing> resolve_addressing(const S3Options& opts, const Sources& src, const std::string& bucket,
                                      const Endpoint& endpoint) {
  if (opts.addressing != Addressing::auto_) return opts.addressing;
  if (auto style = key(src.config_section(), "s3.addressing_style")) {
    std::string s = ascii_lower(*style);
    if (s == "path") return Addressing::path;
    if (s == "virtual") return Addressing::virtual_host;
    if (s != "auto") {
      return Error{EINVAL, "AWS settings: s3 addressing_style '" + *style + "' of " + src.profile_in(src.config) +
                               " is not path, virtual or auto"};
    }
  }
  const std::string& host = endpoint.host;
  bool aws_host = host == "amazonaws.com" || ends_with(host, ".amazonaws.com");
  bool dns_bucket = bucket.find('.') == std::string::npos;
  return aws_host && dns_bucket ? Addressing::virtual_host : Addressing::path;
}

}  // namespace

std::map<std::string, IniSection> parse_aws_ini(std::string_view text) {
  std::map<std::string, IniSection> sections;
  IniSection* current = nullptr;
  // A key with an empty value followed by indented "key = value" lines is a nested block
  // ("s3 =\n  addressing_style = path"); those are stored as "s3.addressing_style".
  std::string parent;
  while (!text.empty()) {
    size_t newline = text.find('\n');
    std::string_view raw = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    bool indented = !raw.empty() && (raw[0] == ' ' || raw[0] == '\t');
    std::string_view line = trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      parent.clear();
      current = nullptr;
      if (line.back() != ']') continue;
      std::string_view name = trim(line.substr(1, line.size() - 2));
      if (name.substr(0, 7) == "profile" && name.size() > 7 &&
          kWhitespace.find(name[7]) != std::string_view::npos) {
        name = trim(name.substr(7));
      }
      if (name.empty()) continue;
      current = &sections[std::string(name)];
      continue;
    }
    size_t eq = line.find('=');
    if (current == nullptr || eq == std::string_view::npos) continue;
    std::string name = ascii_lower(trim(line.substr(0, eq)));
    std::string_view value = trim(line.substr(eq + 1));
    if (name.empty()) continue;
    if (indented && !parent.empty()) {
      (*current)[parent + "." + name] = std::string(value);
      continue;
    }
    parent = value.empty() ? name : std::string();
    (*current)[name] = std::string(value);
  }
  return sections;
}

Result<S3Target> resolve_s3(const StoreUrl& url, const S3Options& opts,
                            const std::function<const char*(const char*)>& getenv) {
  if (url.kind != StoreUrl::Kind::s3) {
    return Error{EINVAL, "AWS settings: " + url.text + " is not an s3:// URL"};
  }
  Result<Sources> sources = read_sources(opts, Env(getenv));
  if (!sources) return std::move(sources).error();
  S3Target target;
  if (Status s = resolve_credentials(*sources, target); !s) return std::move(s).error();
  if (Status s = resolve_region(opts, *sources, target); !s) return std::move(s).error();
  if (Status s = resolve_endpoint(opts, *sources, target); !s) return std::move(s).error();
  Result<Addressing> addressing = resolve_addressing(opts, *sources, url.bucket, target.endpoint);
  if (!addressing) return std::move(addressing).error();
  target.path_style = *addressing == Addressing::path;
  return target;
}

}  // namespace fid::net
