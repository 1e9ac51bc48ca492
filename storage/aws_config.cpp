#include "storage/aws_config.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/ascii.h"

namespace fid::storage {
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
  Env env(getenv);
  std::optional<std::string> home = env.get("HOME");

  // The profile: -o profile= wins over AWS_PROFILE; "default" is the one nobody asked for.
  std::string profile = "default";
  std::string profile_setting;
  if (!opts.profile.empty()) {
    profile = opts.profile;
    profile_setting = "-o profile";
  } else if (auto p = env.get("AWS_PROFILE")) {
    profile = *p;
    profile_setting = "AWS_PROFILE";
  }

  std::string credentials_path, config_path;
  std::string credentials_setting = "AWS_SHARED_CREDENTIALS_FILE", config_setting = "AWS_CONFIG_FILE";
  if (auto p = env.get("AWS_SHARED_CREDENTIALS_FILE")) {
    credentials_path = *p;
  } else if (home) {
    credentials_path = *home + "/.aws/credentials";
    credentials_setting = "the default credentials file";
  }
  if (auto p = env.get("AWS_CONFIG_FILE")) {
    config_path = *p;
  } else if (home) {
    config_path = *home + "/.aws/config";
    config_setting = "the default config file";
  }
  Result<IniFile> credentials_file = read_ini(credentials_path, credentials_setting);
  if (!credentials_file) return std::move(credentials_file).error();
  Result<IniFile> config_file = read_ini(config_path, config_setting);
  if (!config_file) return std::move(config_file).error();
  const IniSection* credentials_section = credentials_file->section(profile);
  const IniSection* config_section = config_file->section(profile);

  if (!profile_setting.empty() && credentials_section == nullptr && config_section == nullptr) {
    std::string looked_in;
    for (const IniFile* f : {&credentials_file.value(), &config_file.value()}) {
      if (f->path.empty()) continue;
      if (!looked_in.empty()) looked_in += " and ";
      looked_in += f->path + (f->exists ? "" : " (missing)");
    }
    if (looked_in.empty()) looked_in = "no files (neither HOME nor AWS_*_FILE is set)";
    return Error{EINVAL, "AWS settings: profile '" + profile + "' (" + profile_setting +
                             ") is not in " + looked_in};
  }

  S3Target target;
  // Credentials: the environment, else the profile in the credentials file, else in the
  // config file, else none (anonymous requests, for public buckets).
  auto env_id = env.get("AWS_ACCESS_KEY_ID");
  auto env_secret = env.get("AWS_SECRET_ACCESS_KEY");
  if (env_id && env_secret) {
    target.credentials.access_key_id = *env_id;
    target.credentials.secret_access_key = *env_secret;
    target.credentials.session_token = env.get("AWS_SESSION_TOKEN").value_or("");
    target.credentials_from = "environment";
  } else if (env_id || env_secret) {
    return Error{EINVAL, std::string("AWS settings: ") +
                             (env_id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                                     : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not") +
                             "; set both, or neither to use ~/.aws"};
  } else {
    target.credentials_from = "none";
    for (const IniFile* f : {&credentials_file.value(), &config_file.value()}) {
      std::string where = "profile " + profile + " in " + f->path;
      auto found = credentials_in(f->section(profile), where);
      if (!found) return std::move(found).error();
      if (*found) {
        target.credentials = std::move(**found);
        target.credentials_from = where;
        break;
      }
    }
  }

  // Region: explicit option, environment, profile, us-east-1.
  std::string region_setting = "the default";
  target.region = "us-east-1";
  if (!opts.region.empty()) {
    target.region = opts.region;
    region_setting = "-o region";
  } else if (auto r = env.get("AWS_REGION")) {
    target.region = *r;
    region_setting = "AWS_REGION";
  } else if (auto r2 = env.get("AWS_DEFAULT_REGION")) {
    target.region = *r2;
    region_setting = "AWS_DEFAULT_REGION";
  } else if (auto r3 = key(config_section, "region")) {
    target.region = *r3;
    region_setting = "region of profile " + profile + " in " + config_file->path;
  }
  // The region goes into the default endpoint's host name and into every signature.
  if (!valid_region(target.region)) {
    return Error{EINVAL, "AWS settings: region '" + target.region + "' (" + region_setting +
                             ") is not letters, digits and '-'"};
  }

  // Endpoint: explicit option, environment (S3's own first), profile, AWS's regional one.
  std::string endpoint_text = "https://s3." + target.region + ".amazonaws.com";
  std::string endpoint_setting = "the default endpoint";
  if (!opts.endpoint.empty()) {
    endpoint_text = opts.endpoint;
    endpoint_setting = "-o endpoint";
  } else if (auto e = env.get("AWS_ENDPOINT_URL_S3")) {
    endpoint_text = *e;
    endpoint_setting = "AWS_ENDPOINT_URL_S3";
  } else if (auto e2 = env.get("AWS_ENDPOINT_URL")) {
    endpoint_text = *e2;
    endpoint_setting = "AWS_ENDPOINT_URL";
  } else if (auto e3 = key(config_section, "endpoint_url")) {
    endpoint_text = *e3;
    endpoint_setting = "endpoint_url of profile " + profile + " in " + config_file->path;
  }
  Result<Endpoint> endpoint = parse_endpoint(endpoint_text);
  if (!endpoint) {
    return Error{EINVAL, "AWS settings: " + endpoint_setting + ": " + endpoint.error().message};
  }
  target.endpoint = std::move(endpoint).value();

  // Addressing: explicit option, the profile's s3.addressing_style, else decided here.
  Addressing addressing = opts.addressing;
  if (addressing == Addressing::auto_) {
    if (auto style = key(config_section, "s3.addressing_style")) {
      std::string s = ascii_lower(*style);
      if (s == "path") {
        addressing = Addressing::path;
      } else if (s == "virtual") {
        addressing = Addressing::virtual_host;
      } else if (s != "auto") {
        return Error{EINVAL, "AWS settings: s3 addressing_style '" + *style + "' of profile " +
                                 profile + " in " + config_file->path +
                                 " is not path, virtual or auto"};
      }
    }
  }
  if (addressing == Addressing::auto_) {
    // Other servers (Ceph, MinIO, ...) are usually reached by address or by a name without
    // per-bucket DNS; a bucket with dots breaks the TLS wildcard certificate of AWS's hosts.
    const std::string& host = target.endpoint.host;
    bool aws_host = host == "amazonaws.com" || ends_with(host, ".amazonaws.com");
    bool dns_bucket = url.bucket.find('.') == std::string::npos;
    addressing = aws_host && dns_bucket ? Addressing::virtual_host : Addressing::path;
  }
  target.path_style = addressing == Addressing::path;
  return target;
}

}  // namespace fid::storage
