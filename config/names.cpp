// The settings' values as the config file and -o spell them (config.h declares these).
#include "config/config.h"

namespace fid::config {

std::string_view raw_names_name(RawNames n) { return n == RawNames::keep ? "keep" : "ext"; }
std::string_view encoding_name(Encoding e) { return e == Encoding::sequential ? "sequential" : "progressive"; }
std::string_view on_off_name(bool on) { return on ? "on" : "off"; }
std::string_view addressing_name(Addressing a) {
  switch (a) {
    case Addressing::path: return "path";
    case Addressing::virtual_host: return "virtual";
    case Addressing::auto_: break;
  }
  return "auto";
}

std::string_view readdir_name(Readdir r) {
  return r == Readdir::plus ? "plus" : r == Readdir::plain ? "plain" : "auto";
}

std::string_view transport_name(Transport t) {
  return t == Transport::uring ? "uring" : t == Transport::dev ? "dev" : "auto";
}

std::string_view random_reads_name(RandomReads r) {
  return r == RandomReads::records ? "records" : r == RandomReads::pieces ? "pieces" : "auto";
}

std::string_view order_ranks_name(OrderRanks r) { return r == OrderRanks::per_epoch ? "per-epoch" : "stable"; }

std::string level_changers_text(const LevelChangers& c) {
  switch (c.who) {
    case LevelChangers::Who::anyone: return "anyone";
    case LevelChangers::Who::group: return "group=" + c.group;
    case LevelChangers::Who::owner: break;
  }
  return "owner";
}

std::string_view gpu_name(Gpu g) {
  switch (g) {
    case Gpu::auto_: return "auto";
    case Gpu::on: return "on";
    case Gpu::off: return "off";
    case Gpu::emulate: return "emulate";
  }
  return "auto";
}

}  // namespace fid::config
