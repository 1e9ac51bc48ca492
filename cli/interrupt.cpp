#include "cli/interrupt.h"

#include <csignal>

namespace fid::cli {

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

}  // namespace

const std::atomic<bool>& cancel_on_interrupt() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return g_interrupted;
}

}  // namespace fid::cli
