// Administration of an open array: the commands behind `eraid status|fail|replace|scrub|
// convert|inspect`. The same code runs in two places:
//   - inside the nbdkit plugin, answering the admin socket DIR/admin.sock while it serves;
//   - inside the `eraid` command itself, on an array it opened offline (none serves).
// The wire protocol of the admin socket is in docs/format/admin-protocol.md.
//
// Thread-safety: RunAdmin may be called concurrently with I/O on the same ArrayDir, and
// with another RunAdmin (a replace runs one at a time; see ArrayDir::Replace).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tools/server/array_dir.h"

namespace eraid {

// What a running rebuild looks like from outside, for `status` while `replace` runs.
struct AdminState {
  std::atomic<int> rebuilding_device{-1};
  std::atomic<uint32_t> rebuild_done{0}, rebuild_total{0};
  std::atomic<uint64_t> rebuild_bytes{0};
};

struct AdminReply {
  int rc = 0;        // process exit code: 0 ok, 1 failed, 2 bad arguments
  std::string text;  // what the command prints (JSON if asked for)
};

// One admin request as a handler sees it (admin.cc).
struct AdminRequest;

// An admin verb's argument word: the CLI takes it as --NAME.
struct AdminArg {
  enum Kind { kText, kNumber };
  const char* name;
  const char* help;
  const char* fallback;  // the word when not given ("" shows no default); nullptr: required
  Kind kind = kText;
  uint64_t min = 0, max = UINT64_MAX;  // kNumber: checked by the CLI before it asks
};

// The admin verbs, said once for both sides: the CLI (`eraid VERB --dir D ...`: its
// synopsis, options and the words they become) and the admin socket (how many words each
// takes, and what runs it).
struct AdminVerb {
  const char* name;
  const char* summary;   // its line in `eraid --help`; nullptr: not a subcommand of its own
  const char* synopsis;  // the first lines of `eraid VERB --help`
  std::span<const AdminArg> args;  // the words after the verb, in order
  bool long_running = false;       // the CLI shows a progress bar
  bool watches = false;            // the CLI's --interval/--count (status)
  bool variadic = false;           // more words than args (volume: its own usage)
  AdminReply (*run)(const AdminRequest&) = nullptr;
  size_t min_words() const;
  size_t max_words() const;
};
std::span<const AdminVerb> AdminVerbs();
// Nothing if the word is fine, else what the CLI says about it ("--bins must be 1..1000").
std::optional<std::string> CheckAdminArg(const AdminArg& arg, const std::string& word);

// `words`: the command and its arguments, e.g. {"fail", "2"}, {"convert", "raid10", "all"},
// {"replace", "1", "/path/new"}; a trailing "--json" selects JSON output. `progress`
// receives a fraction in [0,1] during long commands (replace, scrub, convert).
// `cancelled`, if given, is asked between segments by convert, which stops early when it
// says so (the client has gone: a killed `eraid convert` stops converting).
AdminReply RunAdmin(ArrayDir& a, AdminState& state, const std::vector<std::string>& words,
                    const std::function<void(double)>& progress,
                    const std::function<bool()>& cancelled = nullptr);

// The admin socket's path for an array directory.
std::string AdminSocketPath(const std::string& dir);

// Client side: sends `words` to a serving array's admin socket. NotFound if nothing
// listens there (the caller then opens the array offline); `progress` as above.
Result<AdminReply> AdminCall(const std::string& dir, const std::vector<std::string>& words,
                             const std::function<void(double)>& progress);

// Server side: listens on AdminSocketPath(dir) (mode 0600), one thread per connection,
// until Stop(). `on_shutdown` runs for the "shutdown" command.
class AdminServer {
 public:
  AdminServer(ArrayDir& array, std::function<void()> on_shutdown);
  ~AdminServer();  // Stop()s
  Status Start();
  void Stop();

 private:
  void Loop();
  void Serve(int fd);
  ArrayDir& array_;
  std::function<void()> on_shutdown_;
  AdminState state_;
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers_;  // finished ones are joined as new connections come
  std::vector<int> open_fds_;
  std::thread acceptor_;
};

}  // namespace eraid
