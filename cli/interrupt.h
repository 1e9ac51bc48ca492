// SIGINT and SIGTERM as a flag, for the commands that stop cleanly when interrupted (pack,
// merge): their work polls the flag and removes what it has written.
#pragma once

#include <atomic>

namespace fid::cli {

// Installs the handlers (once) and returns the flag they set.
const std::atomic<bool>& cancel_on_interrupt();

}  // namespace fid::cli
