#include "core/change_access.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.h"

namespace fid::core {

ChangeAccess::ChangeAccess(config::LevelChangers who, uid_t owner, std::optional<gid_t> group)
    : who_(std::move(who)), owner_(owner), group_(group) {}

bool ChangeAccess::allows(const Caller& c) const {
  if (who_.who == config::LevelChangers::Who::anyone || c.uid == 0 || c.uid == owner_) return true;
  if (who_.who != config::LevelChangers::Who::group || !group_) return false;
  return c.gid == *group_ || std::find(c.groups.begin(), c.groups.end(), *group_) != c.groups.end();
}

Status ChangeAccess::check(const Caller& c) {
  if (allows(c)) return {};
  bool first = false;
  {
    std::lock_guard lock(mu_);
    ++refusals_;
    if (logged_.size() < kLoggedUids) first = logged_.insert(c.uid).second;
  }
  const std::string rule = fmt::format("level_changes={}: {} may change levels", config::level_changers_text(who_), describe());
  if (first) log_warn("refused a level change by uid {} ({}; later refusals of this uid are not logged)", c.uid, rule);
  return Error{EPERM, rule};
}

uint64_t ChangeAccess::refusals() const {
  std::lock_guard lock(mu_);
  return refusals_;
}

std::string ChangeAccess::describe() const {
  if (who_.who == config::LevelChangers::Who::anyone) return "anyone";
  std::string s = fmt::format("the owner (uid {}) and root", owner_);
  if (who_.who == config::LevelChangers::Who::group && group_)
    s = fmt::format("the owner (uid {}), root and group {} (gid {})", owner_, who_.group, *group_);
  return s;
}

}  // namespace fid::core
