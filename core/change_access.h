// Who may set or remove user.fidelity.* attributes. A level or the order seed changes what every
// user of a shared (allow_other) mount reads, so by default only the user who mounted and root
// may change them (config::LevelChangers widens that on purpose). Reads stay open to all.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "config/config.h"

namespace fid::core {

// The process that sent a request: its user, primary group and supplementary groups.
struct Caller {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

class ChangeAccess {
 public:
  // `owner`: the uid that mounted; `group`: the gid of who == group (resolved by the caller).
  ChangeAccess(config::LevelChangers who, uid_t owner, std::optional<gid_t> group);

  // Ok, or EPERM naming the rule. The first refusal of each uid is logged (at most kLoggedUids).
  Status check(const Caller& c);
  uint64_t refusals() const;
  // "owner (uid 1000) and root", "anyone", "owner (uid 0), root and group train (gid 1001)".
  std::string describe() const;

  static constexpr size_t kLoggedUids = 1024;

 private:
  bool allows(const Caller& c) const;

  const config::LevelChangers who_;
  const uid_t owner_;
  const std::optional<gid_t> group_;
  mutable std::mutex mu_;
  std::unordered_set<uid_t> logged_;
  uint64_t refusals_ = 0;
};

}  // namespace fid::core
