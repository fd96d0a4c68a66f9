// Running nbdkit with the eraid plugin: what `eraid serve`, `eraid stop` and `eraid demo`
// share. nbdkit is the NBD server; this only builds its command line, starts it, and
// cleans up after it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "raid/array.h"

namespace eraid {

// The default nbdkit threads when a drive is remote or modeled: a client's usual queue depth.
inline constexpr uint32_t kSlowDriveThreads = 16;

struct ServeOptions {
  std::string dir;
  std::string socket;            // Unix socket (default DIR/nbd.sock); mode 0600
  std::string tcp;               // ADDR:PORT instead of a Unix socket; needs TLS
  std::string tls_psk;           // nbdkit --tls-psk file
  std::string tls_certificates;  // nbdkit --tls-certificates directory
  // nbdkit worker threads per connection; 0: one per core. More threads than cores only
  // queue on the volume lock: at QD 16 under GC on 2 cores, 8 threads gave a write p99.9 of
  // 6.9-8.3 ms and 2 gave 4.4-4.6 ms at the same rate (docs/block-device.md). With a
  // drive on another host (an NBD URI in the manifest) or a drive model, 0 means
  // kSlowDriveThreads.
  uint32_t threads = 0;
  // The array's CRC cache (ElasticArray::set_crc_cache_bytes), bytes; 0: no bound.
  uint64_t crc_cache_bytes = ElasticArray::kDefaultCrcCacheBytes;
  std::string nbdkit = "nbdkit";
  std::string plugin;  // default: FindPlugin()
  std::string log;     // nbdkit's stderr (empty: inherited)
};

// The plugin next to the running executable (the build tree), or under ../lib/eraid.
std::string FindPlugin();

// Checks the options (TCP only with TLS, the array not served already) and returns the
// nbdkit command line.
Result<std::vector<std::string>> NbdkitCommand(ServeOptions& o);

// Starts nbdkit in the foreground of a child process (it exits with its parent, too);
// returns its pid once the admin socket answers, or the reason it did not start.
Result<pid_t> StartServer(ServeOptions o, int timeout_seconds = 60);

// Asks the serving nbdkit to shut down and waits until the array is closed.
Status StopServer(const std::string& dir, int timeout_seconds = 60);

// True if some process holds the array open (served, or open offline).
bool ArrayInUse(const std::string& dir);

}  // namespace eraid
