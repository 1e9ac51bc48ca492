// fidelityfs doc man1|man8|mount-options|bash-completion (hidden): prints a document made from
// the binary's own tables: the CLI11 subcommands with their options, and
// config::mount_option_docs(), which comes from the table that parses the mount options. The build
// runs it for the package (packaging/CMakeLists.txt); tests/integration/test_package.py checks
// docs/MOUNT.md's options table against `mount-options`.
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/doc.h"
#include "config/config.h"

namespace fid::cli {

namespace {

constexpr std::string_view kProgram = "fidelityfs";

// ---- the option docs' Markdown (`code`) as plain text, roff and a table cell ----------------

std::string plain(std::string_view md) {
  std::string out;
  for (char c : md)
    if (c != '`') out += c;
  return out;
}

// man(7) text: escapes, `code` in bold, newlines as line breaks, and no line that starts with a
// control character.
std::string roff(std::string_view md) {
  std::string out;
  bool code = false;
  bool line_start = true;
  for (char c : md) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    line_start = false;
    switch (c) {
      case '`': out += code ? "\\fR" : "\\fB"; code = !code; break;
      case '\\': out += "\\e"; break;
      case '-': out += "\\-"; break;
      case '\n': out += "\n.br\n"; line_start = true; break;
      default: out += c;
    }
  }
  return out;
}

// A description's first line, less the colon that introduces the rest.
std::string first_line(std::string_view text) {
  text = text.substr(0, text.find('\n'));
  if (text.ends_with(':')) text.remove_suffix(1);
  return std::string(text);
}

// "values: about", or "about" for a setting that takes no value.
std::string values_and_about(const config::MountOptionDoc& d) {
  return d.values.empty() ? std::string(d.about) : fmt::format("{}: {}", d.values, d.about);
}

// ---- the command line, from CLI11 ----------------------------------------------------------

// The subcommands a user sees (hidden ones have no group), depth first: pack, ..., l3, l3 encode.
void visible_commands(const CLI::App& app, std::vector<const CLI::App*>& out) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); })) {
    out.push_back(sub);
    visible_commands(*sub, out);
  }
}

// "fidelityfs l3 encode": the root app's own name is argv[0] as typed, so not used.
std::string command_path(const CLI::App& cmd) {
  std::string path;
  for (const CLI::App* a = &cmd; a->get_parent(); a = a->get_parent()) path = " " + a->get_name() + path;
  return std::string(kProgram) + path;
}

std::vector<std::string> option_names(const CLI::Option& o) {
  std::vector<std::string> names;
  for (const auto& s : o.get_snames()) names.push_back("-" + s);
  for (const auto& l : o.get_lnames()) names.push_back("--" + l);
  return names;
}

bool takes_value(const CLI::Option& o) { return o.get_expected_min() > 0; }

// A .TP paragraph for a positional or an option; `brief`: only the description's first line.
std::string roff_option(const CLI::Option& o, bool brief) {
  std::string tag;
  if (o.get_positional()) {
    tag = fmt::format("\\fI{}\\fR", roff(o.get_name(true)));
  } else {
    for (const auto& n : option_names(o)) tag += fmt::format("{}\\fB{}\\fR", tag.empty() ? "" : ", ", roff(n));
    if (takes_value(o)) tag += fmt::format(" \\fI{}\\fR", roff(o.get_type_name()));
  }
  std::string text = brief ? first_line(o.get_description()) : o.get_description();
  if (!o.get_default_str().empty()) text += fmt::format(" (default: {})", o.get_default_str());
  return fmt::format(".TP\n{}\n{}\n", tag, roff(text));
}

// "\fBfidelityfs pack\fR \fISRC_DIR\fR \fISTORE_DIR\fR [\fIoptions\fR]"
std::string roff_usage(const CLI::App& cmd) {
  std::string usage = fmt::format("\\fB{}\\fR", roff(command_path(cmd)));
  bool options = false;
  for (const CLI::Option* o : cmd.get_options()) {
    if (o->get_positional()) usage += fmt::format(" \\fI{}\\fR", roff(o->get_name(true)));
    else options = true;
  }
  if (!cmd.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }).empty())
    usage += " \\fICOMMAND\\fR";
  if (options) usage += " [\\fIoptions\\fR]";
  return usage;
}

std::string roff_header(std::string_view title, int section, std::string_view volume) {
  // .nh: no hyphenation, so that option names stay whole; .ad l: ragged right.
  return fmt::format(".TH {} {} \"\" \"{} {}\" \"{}\"\n.nh\n.ad l\n", roff(title), section, kProgram,
                     FIDELITYFS_VERSION, volume);
}

constexpr std::string_view kExitStatus =
    ".SH EXIT STATUS\n"
    ".TP\n0\nsuccess\n"
    ".TP\n1\nruntime failure (unreadable or damaged store, a failed mount, a failed check); the message names "
    "the file and the cause\n"
    ".TP\n2\nusage or configuration error (unknown option, bad value, bad YAML)\n";
static_assert(kExitOk == 0 && kExitRuntime == 1 && kExitUsage == 2, "update kExitStatus");

std::string man1(const CLI::App& app) {
  std::vector<const CLI::App*> commands;
  visible_commands(app, commands);
  std::string description = app.get_description();
  if (std::string prefix = fmt::format("{}: ", kProgram); description.starts_with(prefix))
    description.erase(0, prefix.size());
  std::string out = roff_header("FIDELITYFS", 1, "User Commands");
  out += fmt::format(".SH NAME\n{} \\- {}\n.SH SYNOPSIS\n", kProgram, roff(description));
  for (const CLI::App* cmd : commands) out += roff_usage(*cmd) + "\n.br\n";
  out += ".SH DESCRIPTION\n" +
         roff("`fidelityfs pack` packs an image folder tree once into a store; `fidelityfs mount` mounts it, "
              "read-only, as an ordinary directory tree whose JPEGs read at a chosen level (scan group). "
              "STORE is a store folder, `s3://BUCKET/PREFIX` or `http(s)://HOST/PATH`. The mount options: "
              "fidelityfs-mount(8); the whole behaviour: /usr/share/doc/fidelityfs/MOUNT.md.") +
         "\n.SH OPTIONS\n";
  for (const CLI::Option* o : app.get_options()) out += roff_option(*o, false);
  out += ".SH COMMANDS\n";
  for (const CLI::App* cmd : commands) {
    out += fmt::format(".SS\n{}\n{}\n", roff_usage(*cmd), roff(cmd->get_description()));
    for (const CLI::Option* o : cmd->get_options()) out += roff_option(*o, false);
  }
  out += kExitStatus;
  out += ".SH SEE ALSO\n\\fBfidelityfs\\-mount\\fR(8), \\fBfusermount3\\fR(1)\n";
  return out;
}

const CLI::App& mount_command(const CLI::App& app) { return *app.get_subcommand("mount"); }

// Sections of .TP paragraphs: a heading, then (tag, text) pairs, the text markdown-ish as roff() takes it.
struct ManSection {
  std::string_view heading;
  std::vector<std::pair<std::string_view, std::string_view>> items;
};

// What a user of a mount reads about besides its options: attributes, the control folder, the
// environment and the files the daemon uses (docs/MOUNT.md has each at length).
const std::vector<ManSection>& mount_reference() {
  static const std::vector<ManSection> sections = {
      {"EXTENDED ATTRIBUTES",
       {{"user.fidelity.scan_group",
         "on a JPEG file or a folder: the effective level; set `1`..L or `full` to override it (a folder's covers "
         "its subtree), remove it to fall back (`setfattr -x`). A bad value is EINVAL, a name of ours that does "
         "not exist ENOTSUP, a user `level_changes` does not allow EPERM"},
        {"user.fidelity.order_seed", "on the mount's root: the seed of the published orders; set it, or remove it "
                                     "to go back to the configured one"},
        {"user.fidelity.kind, levels, bytes, record, position, source_size, format",
         "read-only facts of a file: its kind (jpeg, l3, blob), L, its size at every level, where it is stored, "
         "its source size, an l3 file's container"}}},
      {"THE CONTROL FOLDER",
       {{"MOUNTPOINT/.fidelity/stats", "the daemon's counters as JSON (`fidelityfs stats` summarises them)"},
        {"MOUNTPOINT/.fidelity/config", "the effective settings as JSON"},
        {"MOUNTPOINT/.fidelity/metrics", "the counters in the Prometheus text format"},
        {"MOUNTPOINT/.fidelity/sg/K/", "the whole tree at level K"},
        {"MOUNTPOINT/.fidelity/order/epoch-E[.rank-R-of-W]",
         "the published read order of an epoch (one path a line), which makes a cold epoch sequential"}}},
      {"ENVIRONMENT",
       {{"XDG_CACHE_HOME, HOME", "the cache folder: $XDG_CACHE_HOME/fidelityfs, else ~/.cache/fidelityfs"},
        {"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL",
         "credentials, region and endpoint of an s3:// store, as AWS's tools take them (`-o` overrides)"},
        {"FIDELITYFS_BIN", "the binary mount.fidelityfs runs"}}},
      {"FILES",
       {{"CACHE/tables/", "the tables file of each store, made on its first mount and mapped by the next ones"},
        {"CACHE/fidelityfs.log", "the daemon's log where nothing listens on /dev/log and no `log.file` is set"},
        {"/usr/share/doc/fidelityfs/examples/mnt\\-imagenet.mount", "a systemd mount unit of a store"}}},
  };
  return sections;
}

std::string man8(const CLI::App& app) {
  const CLI::App& mount = mount_command(app);
  std::string out = roff_header("FIDELITYFS-MOUNT", 8, "System Administration");
  out += fmt::format(".SH NAME\nfidelityfs\\-mount, mount.fidelityfs \\- {}\n.SH SYNOPSIS\n{}\n.br\n", roff(mount.get_description()),
                     roff_usage(mount));
  out += "\\fBmount \\-t fuse.fidelityfs\\fR \\fISTORE\\fR \\fIMOUNTPOINT\\fR [\\fB\\-o\\fR \\fIOPT\\fR[,\\fIOPT\\fR...]]\n";
  out += ".SH DESCRIPTION\n" +
         roff("`fidelityfs mount` opens the store, starts a daemon and returns once the mount answers (with `-f` it "
              "stays in the foreground). The tree is read-only; a JPEG reads at its level: its own or its nearest "
              "folder's `user.fidelity.scan_group` xattr, else the first matching config rule, else `scan_group`. "
              "Unmount with `fusermount3 -u MOUNTPOINT` (or `umount`).") +
         "\n.PP\n" +
         roff("`mount.fidelityfs` (also installed as `mount.fuse.fidelityfs`) is the helper mount(8) runs for "
              "the type `fuse.fidelityfs`, so /etc/fstab lines and systemd .mount units work: it runs "
              "`fidelityfs mount STORE MOUNTPOINT -o` with the line's options, of which fidelityfs ignores the "
              "generic ones (`defaults`, `auto`, `noauto`, `nofail`, `_netdev`, `rw`, `ro`, `user`, `nosuid`, "
              "`nodev`, `noatime`, `x-*`, ...). It runs `$FIDELITYFS_BIN`, else `fidelityfs` on PATH, else "
              "/usr/bin/fidelityfs, else /usr/local/bin/fidelityfs. The mount point must be empty unless "
              "`-o nonempty` is given.") +
         "\n.SH COMMAND-LINE OPTIONS\n";
  for (const CLI::Option* o : mount.get_options()) out += roff_option(*o, true);
  out += ".SH MOUNT OPTIONS\n" +
         roff("Given with `-o` (comma-separated, repeatable), in the options field of /etc/fstab, or under their "
              "YAML keys in the configuration file (`--config FILE`); an `-o` value overrides the file's. Unknown "
              "options, unknown keys and bad values are errors (exit 2). Sections named in quotes are those of "
              "/usr/share/doc/fidelityfs/MOUNT.md.") +
         "\n";
  for (const auto& d : config::mount_option_docs()) {
    std::string tag;
    if (!d.option.empty()) tag = fmt::format("\\fB{}\\fR", roff(d.option));
    if (d.yaml_key.empty()) tag += " (\\-o only)";
    else if (d.option.empty()) tag += fmt::format("\\fB{}\\fR (configuration file only)", roff(d.yaml_key));
    else if (d.yaml_key != d.option) tag += fmt::format(" (YAML \\fB{}\\fR)", roff(d.yaml_key));
    out += fmt::format(".TP\n{}\n{}\n", tag, roff(values_and_about(d)));
  }
  for (const ManSection& section : mount_reference()) {
    out += fmt::format(".SH {}\n", section.heading);
    for (const auto& [tag, text] : section.items) out += fmt::format(".TP\n\\fB{}\\fR\n{}\n", tag, roff(text));
  }
  out += ".SH EXAMPLES\n.nf\n" +
         roff("fidelityfs mount /data/imagenet.store /mnt/imagenet -o scan_group=5\n"
              "setfattr -n user.fidelity.scan_group -v 3 /mnt/imagenet/train     # a folder and below\n"
              "getfattr -n user.fidelity.scan_group /mnt/imagenet/train/a/1.jpg  # a file's level\n"
              "fidelityfs stats /mnt/imagenet\n"
              "fusermount3 -u /mnt/imagenet\n"
              "# /etc/fstab\n"
              "/data/imagenet.store  /mnt/imagenet  fuse.fidelityfs  scan_group=5,allow_other,nofail  0 0") +
         "\n.fi\n";
  out += kExitStatus;
  out += ".SH SEE ALSO\n\\fBfidelityfs\\fR(1), \\fBmount\\fR(8), \\fBfstab\\fR(5), \\fBsystemd.mount\\fR(5), "
         "\\fBfusermount3\\fR(1)\n";
  return out;
}

// The table of docs/MOUNT.md, "Options": one row a setting.
std::string mount_options_markdown() {
  auto cell = [](std::string_view s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::string out = "| `-o` option | YAML key | values (default): what it does |\n| --- | --- | --- |\n";
  for (const auto& d : config::mount_option_docs()) {
    out += fmt::format("| {} | {} | {} |\n", d.option.empty() ? "—" : fmt::format("`{}`", d.option),
                       d.yaml_key.empty() ? "—" : fmt::format("`{}`", d.yaml_key), cell(values_and_about(d)));
  }
  return out;
}

// ---- bash completion ---------------------------------------------------------------------

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// The completion script; bash_completion fills in the tables ({{ and }} are braces).
constexpr std::string_view kCompletionScript = R"(# bash completion of fidelityfs: subcommands, their options, and the mount options after -o.
# Generated by `fidelityfs doc bash-completion` from the binary's own tables; do not edit.
_fidelityfs() {{
  # The words up to the cursor, split at blanks only: bash's own split (COMP_WORDBREAKS) also cuts
  # at '=' and ':', which -o lists are full of.
  local line=${{COMP_LINE:0:COMP_POINT}}
  local -a words
  read -r -a words <<<"$line"
  [[ -z $line || $line == *[[:blank:]] ]] && words+=("")
  local cur=${{words[-1]}} prev="" command={program} i
  ((${{#words[@]}} > 1)) && prev=${{words[-2]}}
  for ((i = 1; i < ${{#words[@]}} - 1; i++)); do
    case "$command ${{words[i]}}" in
      {known_paths}) command+=" ${{words[i]}}" ;;
    esac
  done
  local subcommands="" options="" valued=""
  case $command in
{cases}  esac
  local -a candidates
  local choices=""
  case "$command $prev" in
{option_values}  esac
  if [[ $command == "{program} mount" && $prev == -o ]]; then
    # The list's last item: a name to complete after the items before it, or its value after '='.
    local item=${{cur##*,}}
    if [[ $item == *=* ]]; then
      case ${{item%%=*}} in
{mount_values}      esac
      mapfile -t candidates < <(compgen -P "${{cur%"$item"}}${{item%%=*}}=" -W "$choices" -- "${{item#*=}}")
    else
      mapfile -t candidates < <(compgen -P "${{cur%"$item"}}" -W "{mount_options}" -- "$item")
    fi
  elif [[ -n $choices ]]; then
    mapfile -t candidates < <(compgen -W "$choices" -- "$cur")
  elif [[ " $valued " == *" $prev "* ]]; then
    mapfile -t candidates < <(compgen -f -- "$cur")
  elif [[ $cur == -* ]]; then
    mapfile -t candidates < <(compgen -W "$options" -- "$cur")
  elif [[ -n $subcommands ]]; then
    mapfile -t candidates < <(compgen -W "$subcommands" -- "$cur")
  else
    mapfile -t candidates < <(compgen -f -- "$cur")
  fi
  # Bash replaces only its own current word, the tail of ours after its last word break.
  local word=${{COMP_WORDS[COMP_CWORD]-}} candidate
  local cut=$((${{#cur}} - ${{#word}}))
  ((cut < 0)) && cut=0
  COMPREPLY=()
  for candidate in "${{candidates[@]}}"; do COMPREPLY+=("${{candidate:cut}}"); done
  if [[ ${{#COMPREPLY[@]}} == 1 && ${{COMPREPLY[0]}} == *= ]]; then compopt -o nospace 2>/dev/null; fi
  return 0
}}
complete -F _fidelityfs {program}
)";

// The values an option offers to complete: a choice validator's members ("TEXT:{pcr,fast}").
std::vector<std::string> option_choices(const CLI::Option& o) {
  const std::string type = o.get_type_name();
  const size_t open = type.find('{'), close = type.find('}', open);
  std::vector<std::string> out;
  if (open == std::string::npos || close == std::string::npos) return out;
  for (size_t a = open + 1, b; a < close; a = b + 1) {
    b = std::min(type.find(',', a), close);
    out.push_back(type.substr(a, b - a));
  }
  return out;
}

// The values a mount option offers: its documented keywords when it takes one of a list
// ("`auto`, `plus`, `plain` (`auto`)"); levels 1..10 and full for "`1`..L or `full`" (L is 10
// in the stores pack writes); none for free values (BYTES, DIR, ...) and ranges of numbers.
std::vector<std::string> mount_option_choices(std::string_view values) {
  std::vector<std::string> out;
  values = values.substr(0, values.find(" ("));  // the default follows
  if (!values.starts_with('`')) return out;
  if (values.starts_with("`1`..L")) {
    for (int k = 1; k <= 10; ++k) out.push_back(std::to_string(k));
  } else if (values.find("..") != std::string_view::npos) {
    return out;  // a range of numbers
  }
  for (size_t a = values.find('`'); a != std::string_view::npos; a = values.find('`', a + 1)) {
    const size_t b = values.find('`', a + 1);
    if (b == std::string_view::npos) break;
    std::string word(values.substr(a + 1, b - a - 1));
    if (word.ends_with("=NAME")) word.resize(word.size() - 4);
    if (word != "1" || out.empty()) out.push_back(word);
    a = b;
  }
  return out;
}

std::string bash_completion(const CLI::App& app) {
  std::vector<const CLI::App*> commands{&app};
  visible_commands(app, commands);
  std::vector<std::string> paths;  // "fidelityfs pack", ... (not the root)
  std::string cases, option_values, mount_values;
  for (const CLI::App* cmd : commands) {
    std::string path = cmd == &app ? std::string(kProgram) : command_path(*cmd);
    if (cmd != &app) paths.push_back(fmt::format("\"{}\"", path));
    std::vector<std::string> subcommands, options, valued, choices;
    for (const CLI::App* sub : cmd->get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
      subcommands.push_back(sub->get_name());
    for (const CLI::Option* o : cmd->get_options()) {
      if (o->get_positional()) continue;
      for (const auto& n : option_names(*o)) {
        options.push_back(n);
        if (takes_value(*o)) valued.push_back(n);
        if (const auto values = option_choices(*o); !values.empty())
          choices.push_back(fmt::format("\"{} {}\") choices=\"{}\" ;;", path, n, join(values)));
      }
    }
    cases += fmt::format("    \"{}\") subcommands=\"{}\" options=\"{}\" valued=\"{}\" ;;\n", path, join(subcommands),
                         join(options), join(valued));
    for (const auto& c : choices) option_values += "    " + c + "\n";
  }
  std::vector<std::string> mount_options;
  for (const auto& d : config::mount_option_docs()) {
    if (d.option.empty()) continue;
    mount_options.push_back(std::string(d.option) + (d.values.empty() ? "" : "="));
    if (const auto values = mount_option_choices(d.values); !values.empty())
      mount_values += fmt::format("    {}) choices=\"{}\" ;;\n", d.option, join(values));
  }
  std::string known_paths;
  for (const auto& p : paths) known_paths += (known_paths.empty() ? "" : " | ") + p;
  return fmt::format(fmt::runtime(kCompletionScript),
                     fmt::arg("program", kProgram), fmt::arg("known_paths", known_paths), fmt::arg("cases", cases),
                     fmt::arg("mount_options", join(mount_options)), fmt::arg("option_values", option_values),
                     fmt::arg("mount_values", mount_values));
}

}  // namespace

std::string mount_options_help() {
  std::string out = "mount options, comma-separated, repeatable:";
  for (const auto& d : config::mount_option_docs()) {
    if (d.option.empty()) continue;
    out += fmt::format("\n{}{}{}", d.option, d.values.empty() ? "" : "=", plain(d.values));
  }
  return out + "\n(what each does: fidelityfs-mount(8), docs/MOUNT.md)";
}

void register_doc(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("doc", "Print a document made from the binary's own tables");
  cmd->group("");  // hidden: for the build and the tests
  auto topic = std::make_shared<std::string>();
  cmd->add_option("TOPIC", *topic, "man1, man8, mount-options (Markdown) or bash-completion")
      ->required()
      ->transform(one_of({"man1", "man8", "mount-options", "bash-completion"}));
  cmd->callback([&app, topic, &exit_code] {
    if (*topic == "man1") fmt::print("{}", man1(app));
    else if (*topic == "man8") fmt::print("{}", man8(app));
    else if (*topic == "mount-options") fmt::print("{}", mount_options_markdown());
    else fmt::print("{}", bash_completion(app));
    exit_code = kExitOk;
  });
}

}  // namespace fid::cli
