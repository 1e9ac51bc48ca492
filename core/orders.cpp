#include "core/orders.h"

#include <algorithm>
#include <charconv>

#include "core/inodes.h"
#include "index/order.h"

namespace fid::core {

namespace {

// Canonical unsigned decimal: digits only, no leading zero (except "0"), fits in T.
template <typename T>
bool parse_dec(std::string_view s, T& out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::optional<OrderName> parse_order_name(std::string_view name) {
  constexpr std::string_view kEpoch = "epoch-", kRank = ".rank-", kOf = "-of-";
  if (name.substr(0, kEpoch.size()) != kEpoch) return std::nullopt;
  name.remove_prefix(kEpoch.size());
  OrderName n;
  size_t dot = name.find('.');
  if (!parse_dec(name.substr(0, dot), n.epoch)) return std::nullopt;
  if (dot == std::string_view::npos) return n;
  std::string_view rest = name.substr(dot);
  if (rest.substr(0, kRank.size()) != kRank) return std::nullopt;
  rest.remove_prefix(kRank.size());
  size_t of = rest.find(kOf);
  if (of == std::string_view::npos) return std::nullopt;
  if (!parse_dec(rest.substr(0, of), n.rank) || !parse_dec(rest.substr(of + kOf.size()), n.world)) return std::nullopt;
  if (n.world == 0 || n.rank >= n.world) return std::nullopt;
  return n;
}

std::string order_file_name(const OrderName& n) {
  std::string s = "epoch-" + std::to_string(n.epoch);
  if (n.world > 1) s += ".rank-" + std::to_string(n.rank) + "-of-" + std::to_string(n.world);
  return s;
}

// ---- slots ------------------------------------------------------------------------------------

OrderSlots::OrderSlots(uint32_t slots) : names_(slots), generation_(slots, 1), last_use_(slots, 0) {}

uint32_t OrderSlots::acquire(const Held& name, uint64_t* generation) {
  std::lock_guard lock(mu_);
  uint32_t victim = 0;
  for (uint32_t i = 0; i < names_.size(); ++i) {
    if (names_[i] && *names_[i] == name) {
      last_use_[i] = ++clock_;
      if (generation) *generation = generation_[i];
      return i;
    }
    if (last_use_[i] < last_use_[victim]) victim = i;
  }
  if (names_[victim]) ++generation_[victim];
  names_[victim] = name;
  last_use_[victim] = ++clock_;
  if (generation) *generation = generation_[victim];
  return victim;
}

std::optional<OrderSlots::Held> OrderSlots::held(uint32_t slot) const {
  std::lock_guard lock(mu_);
  return slot < names_.size() ? names_[slot] : std::nullopt;
}

// ---- contents ---------------------------------------------------------------------------------

namespace {

// A path as one line of an order file (docs/FORMAT.md): backslash, newline and carriage return
// escaped, so that every file is exactly one line.
void append_escaped(std::string& out, std::string_view path) {
  for (char c : path) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else out.push_back(c);
  }
}

size_t escaped_size(std::string_view path) {
  size_t n = path.size();
  for (char c : path) n += c == '\\' || c == '\n' || c == '\r';
  return n;
}

}  // namespace

OrderContents::OrderContents(const index::Store& store, size_t max_entries,
                             const DisplayNames* display_names)
    : store_(store), max_(max_entries), display_names_(display_names) {
  for (const auto& d : store.dirs()) {
    std::string p;
    append_escaped(p, store.relative_path(d));
    if (!p.empty()) p.push_back('/');
    dir_path_.push_back(std::move(p));
  }
}

std::shared_ptr<const std::string> OrderContents::get(const index::OrderParams& order) {
  {
    std::lock_guard lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->order == order) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().text;
      }
    }
  }
  // Generated outside the lock (pure function; two racing generators produce the same text).
  auto ids = index::epoch_order(store_, order);
  auto text = std::make_shared<std::string>();
  size_t total = 0;
  auto files = store_.files();
  std::string scratch;
  auto name_of = [&](uint32_t id) -> std::string_view {
    if (display_names_ && !display_names_->empty()) return display_names_->of(store_, files[id], scratch);
    return store_.name(files[id]);
  };
  for (uint32_t id : ids) total += dir_path_[files[id].dir].size() + escaped_size(name_of(id)) + 1;
  text->reserve(total);
  for (uint32_t id : ids) {
    text->append(dir_path_[files[id].dir]);
    append_escaped(*text, name_of(id));
    text->push_back('\n');
  }
  std::lock_guard lock(mu_);
  lru_.push_front(Entry{order, text});
  while (lru_.size() > max_) lru_.pop_back();
  return text;
}

size_t OrderContents::cached() {
  std::lock_guard lock(mu_);
  return lru_.size();
}

// ---- the order files of a mount ----------------------------------------------------------------

OrderFiles::OrderFiles(const index::Store& store, uint64_t seed, uint32_t window, index::RankDeal deal,
                       const DisplayNames* display_names)
    : slots_(kOrderSlots),
      contents_(store, 4, display_names),
      configured_seed_(seed),
      seed_(seed),
      window_(window),
      deal_(deal) {}

std::optional<index::OrderParams> OrderFiles::params(uint32_t slot) const {
  auto held = slots_.held(slot);
  if (!held) return std::nullopt;
  index::OrderParams p;
  p.seed = held->seed;
  p.epoch = held->name.epoch;
  p.rank = held->name.rank;
  p.world = std::max(1u, held->name.world);
  p.window = window_;
  p.ranks = deal_;
  return p;
}

std::shared_ptr<const std::string> OrderFiles::text(uint32_t slot) {
  auto order = params(slot);
  return order ? contents_.get(*order) : nullptr;
}

bool OrderFiles::set_seed(uint64_t seed) { return seed_.exchange(seed) != seed; }

index::RankDeal rank_deal(config::OrderRanks ranks) {
  return ranks == config::OrderRanks::per_epoch ? index::RankDeal::per_epoch : index::RankDeal::stable;
}

// ---- index for the prefetcher -----------------------------------------------------------------

std::shared_ptr<const OrderIndex> build_order_index(const index::Store& store, const index::OrderParams& order) {
  index::OrderParams p = order;
  p.world = std::max(1u, order.world);
  const auto orders = index::epoch_rank_orders(store, p);
  auto files = store.files();
  const auto nrec = static_cast<uint32_t>(store.records().size());
  auto ix = std::make_shared<OrderIndex>();
  ix->seed = p.seed;
  ix->epoch = p.epoch;
  ix->world = p.world;
  ix->deal = p.ranks;
  ix->pos.assign(files.size(), UINT32_MAX);
  ix->rec_index.assign(nrec, UINT32_MAX);
  uint32_t i = 0;
  for (const auto& ids : orders) {
    for (uint32_t f : ids) {
      ix->pos[f] = i;
      uint32_t r = files[f].record;
      if (r < nrec) {
        if (ix->rec_index[r] == UINT32_MAX) {
          ix->rec_index[r] = static_cast<uint32_t>(ix->rec_seq.size());
          ix->rec_seq.push_back(r);
          ix->last_pos.push_back(i);
        }
        ix->last_pos[ix->rec_index[r]] = i;
      }
      ++i;
    }
    ix->seg_end.resize(ix->rec_seq.size(), static_cast<uint32_t>(ix->rec_seq.size()));
  }
  return ix;
}

}  // namespace fid::core
