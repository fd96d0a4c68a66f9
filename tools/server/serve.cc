#include "tools/server/serve.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "compress/nbd_backend.h"
#include "tools/server/admin.h"

namespace eraid {

std::string FindPlugin() {
  if (const char* env = std::getenv("ERAID_PLUGIN")) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "nbdkit-eraid-plugin.so";
  for (const auto& candidate : {exe.parent_path() / "nbdkit-eraid-plugin.so",
                                exe.parent_path() / "../lib/eraid/nbdkit-eraid-plugin.so"}) {
    if (std::filesystem::exists(candidate)) return std::filesystem::canonical(candidate).string();
  }
  return "nbdkit-eraid-plugin.so";
}

bool ArrayInUse(const std::string& dir) {
  const std::string path = dir + "/eraid.lock";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return busy;
}

// True if the manifest names a drive by an NBD URI (`drive.K=nbd://...`). Only a
// default is chosen from it: a manifest it cannot read is reported by the plugin.
// Whether a drive's reads hold a thread for a device's time: a drive on another host (an
// NBD URI in the manifest), or drives with a timing model (drive_model other than none).
bool HasSlowDrives(const std::string& dir) {
  std::ifstream in(dir + "/eraid.conf");
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key.rfind("drive.", 0) == 0 && NbdBackend::IsUri(value)) return true;
    if (key == "drive_model" && value != "none") return true;
  }
  return false;
}

Result<std::vector<std::string>> NbdkitCommand(ServeOptions& o) {
  if (o.dir.empty()) return Status::InvalidArgument("--dir is required");
  if (!std::filesystem::exists(o.dir + "/eraid.conf")) {
    return Status::NotFound("no array in " + o.dir + " (make one with eraid create)");
  }
  if (ArrayInUse(o.dir))
    return Status::Busy("the array in " + o.dir + " is already served or open");
  if (o.threads == 0) {
    // One thread per core: beyond that, threads only queue on the volume lock. A drive
    // on another host, or a modeled one, is different: a read of it holds its thread for
    // a network round trip or the drive's latency, so the threads, not the cores, bound
    // the reads in flight — as many as a client's usual queue depth.
    o.threads = std::max(1u, std::thread::hardware_concurrency());
    if (HasSlowDrives(o.dir)) o.threads = std::max(o.threads, kSlowDriveThreads);
  }
  if (o.threads > 1024)
    return Status::InvalidArgument("--threads must be 1..1024 (0: one per core)");
  if (o.plugin.empty()) o.plugin = FindPlugin();
  std::vector<std::string> cmd{o.nbdkit, "-f", "--exit-with-parent", "--threads",
                               std::to_string(o.threads)};
  if (!o.tcp.empty()) {
    if (!o.socket.empty()) return Status::InvalidArgument("give --socket or --tcp, not both");
    if (o.tls_psk.empty() == o.tls_certificates.empty()) {
      return Status::InvalidArgument(
          "--tcp needs TLS: give --tls-psk FILE or --tls-certificates DIR (plain TCP is refused)");
    }
    const size_t colon = o.tcp.rfind(':');
    if (colon == std::string::npos || colon + 1 == o.tcp.size()) {
      return Status::InvalidArgument("--tcp wants ADDR:PORT, e.g. 127.0.0.1:10809");
    }
    std::string addr = o.tcp.substr(0, colon);
    if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']')
      addr = addr.substr(1, addr.size() - 2);
    cmd.insert(cmd.end(), {"-i", addr, "-p", o.tcp.substr(colon + 1), "--tls=require"});
    if (!o.tls_psk.empty())
      cmd.push_back("--tls-psk=" + o.tls_psk);
    else
      cmd.push_back("--tls-certificates=" + o.tls_certificates);
  } else {
    if (!o.tls_psk.empty() || !o.tls_certificates.empty()) {
      return Status::InvalidArgument("TLS options go with --tcp");
    }
    if (o.socket.empty()) o.socket = o.dir + "/nbd.sock";
    cmd.insert(cmd.end(), {"--unix", o.socket});
  }
  // Any request size: nbdkit's blocksize filter turns a request that is not 4 KiB aligned
  // into whole blocks for the plugin (reads rounded out, writes as read-modify-write
  // under the filter's lock, so two writes to different sectors of one block do not
  // undo each other), and advertises a minimum of 1 byte with 4 KiB preferred. Every
  // block the plugin writes is whole, so it stays atomic across a crash.
  cmd.push_back("--filter=blocksize");
  cmd.push_back(o.plugin);
  cmd.push_back("dir=" + o.dir);
  if (!o.socket.empty()) cmd.push_back("socket=" + o.socket);
  cmd.push_back("crc-cache-bytes=" + std::to_string(o.crc_cache_bytes));
  cmd.insert(cmd.end(), {"minblock=4096", "maxdata=32M"});
  return cmd;
}

Result<pid_t> StartServer(ServeOptions o, int timeout_seconds) {
  ERAID_ASSIGN_OR_RETURN(auto cmd, NbdkitCommand(o));
  // nbdkit creates its socket with the default mode; so it listens inside a private (0700)
  // directory, and the socket moves into place only once it is 0600: it is never reachable
  // by anyone else, not even for a moment.
  std::string private_dir;
  if (!o.socket.empty()) {
    ::unlink(o.socket.c_str());  // nbdkit leaves it behind; none serves (checked)
    private_dir = o.socket + ".XXXXXX";
    if (!::mkdtemp(private_dir.data()))
      return Status::IoError("mkdtemp " + private_dir + ": " + std::strerror(errno));
    for (auto& a : cmd) {
      if (a == o.socket) a = private_dir + "/nbd.sock";
    }
  }
  auto cleanup_private = [&] {
    if (private_dir.empty()) return;
    ::unlink((private_dir + "/nbd.sock").c_str());
    ::rmdir(private_dir.c_str());
  };
  const pid_t pid = ::fork();
  if (pid < 0) {
    cleanup_private();
    return Status::IoError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::umask(0077);
    // A sanitizer build of the plugin needs its runtime loaded into nbdkit first (tests).
    if (const char* preload = std::getenv("ERAID_NBDKIT_PRELOAD"); preload && *preload) {
      ::setenv("LD_PRELOAD", preload, 1);
      const char* asan = std::getenv("ASAN_OPTIONS");
      // nbdkit itself is not ours to leak-check (it leaks a connection object now and then);
      // last, so it overrides a detect_leaks=1 the test run sets.
      ::setenv(
          "ASAN_OPTIONS",
          ((asan && *asan ? std::string(asan) + ":" : std::string()) + "detect_leaks=0").c_str(),
          1);
    }
    // The server's large tables (drive maps, the log's map, recovery's working sets) in
    // transparent huge pages where the kernel gives them on request (THP "madvise", as on
    // Debian): an open of a full 4 x 4 GiB array took ~72,000 page faults and 1.8 s with
    // 4 KiB pages, ~11,000 and 1.3 s with them, at no more resident memory. A
    // GLIBC_TUNABLES that already says otherwise is left as it is.
    {
      const char* t = std::getenv("GLIBC_TUNABLES");
      const std::string tunables = t ? t : "";
      if (tunables.find("glibc.malloc.hugetlb") == std::string::npos) {
        ::setenv("GLIBC_TUNABLES",
                 ((tunables.empty() ? "" : tunables + ":") + "glibc.malloc.hugetlb=1").c_str(), 1);
      }
    }
    if (!o.log.empty()) {
      int fd = ::open(o.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
    }
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "eraid: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  bool moved = private_dir.empty();
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      cleanup_private();
      return Status::IoError("nbdkit exited before serving (status " +
                             std::to_string(WEXITSTATUS(status)) + ")" +
                             (o.log.empty() ? "" : "; see " + o.log));
    }
    if (!moved && std::filesystem::exists(private_dir + "/nbd.sock")) {
      const std::string inner = private_dir + "/nbd.sock";
      if (::chmod(inner.c_str(), 0600) != 0 || ::rename(inner.c_str(), o.socket.c_str()) != 0) {
        const int e = errno;
        ::kill(pid, SIGTERM);
        ::waitpid(pid, nullptr, 0);
        cleanup_private();
        return Status::IoError("cannot put the socket at " + o.socket + ": " + std::strerror(e));
      }
      ::rmdir(private_dir.c_str());
      moved = true;
    }
    if (moved && AdminCall(o.dir, {"status", "--json"}, nullptr).ok()) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  cleanup_private();
  return Status::Aborted("nbdkit did not start serving within " + std::to_string(timeout_seconds) +
                         " s");
}

Status StopServer(const std::string& dir, int timeout_seconds) {
  auto reply = AdminCall(dir, {"shutdown"}, nullptr);
  if (!reply.ok()) return reply.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  while (ArrayInUse(dir)) {
    if (std::chrono::steady_clock::now() > deadline)
      return Status::Aborted("the server did not stop");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::Ok();
}

}  // namespace eraid
