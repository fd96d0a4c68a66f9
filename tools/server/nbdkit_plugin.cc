// nbdkit-eraid-plugin: serves an eraid volume (an array directory made by
// `eraid create`) as an NBD export. nbdkit is the server; this is only the block device.
//   nbdkit --unix SOCKET ./nbdkit-eraid-plugin.so dir=DIR
// It also answers the admin socket DIR/admin.sock (tools/admin.h) for `eraid status` etc.
// Each named volume (log/named_volumes.h) is the export of its name; "" is the default volume.
// Thread model parallel (the volume serialises internally); requests must be 4 KiB
// aligned (advertised as the minimum block size) and inside the volume, else EINVAL.
// Trim and zero unmap; block status comes from the log's map.
// `eraid serve` puts nbdkit's blocksize filter in front, so its clients may send any
// size and alignment (tools/serve.cc).
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tools/server/admin.h"
#include "tools/server/array_dir.h"

namespace {

std::string g_dir;
std::string g_socket;  // nbdkit's Unix socket, removed at unload (nbdkit leaves it behind)
uint64_t g_crc_cache_bytes = eraid::ElasticArray::kDefaultCrcCacheBytes;  // crc-cache-bytes
std::unique_ptr<eraid::ArrayDir> g_array;
std::unique_ptr<eraid::AdminServer> g_admin;

int Fail(const eraid::Status& s) {
  nbdkit_error("eraid: %s", s.ToString().c_str());
  nbdkit_set_error(s.code() == eraid::StatusCode::kInvalidArgument ? EINVAL
                   : s.code() == eraid::StatusCode::kNoSpace       ? ENOSPC
                   : s.code() == eraid::StatusCode::kNotFound      ? ENOENT
                                                                   : EIO);
  return -1;
}

bool Aligned(uint64_t offset, uint32_t count) {
  return count > 0 && offset % eraid::kBlockSize == 0 && count % eraid::kBlockSize == 0;
}

// Paths made absolute now: nbdkit run without -f changes to / when it forks into the
// background, and the array opens after that (AfterFork).
int AbsolutePath(const char* value, std::string* out) {
  char* path = nbdkit_absolute_path(value);
  if (path == nullptr) return -1;  // nbdkit has reported why
  *out = path;
  std::free(path);
  return 0;
}

int Config(const char* key, const char* value) {
  if (std::strcmp(key, "dir") == 0) return AbsolutePath(value, &g_dir);
  if (std::strcmp(key, "socket") == 0) return AbsolutePath(value, &g_socket);
  if (std::strcmp(key, "crc-cache-bytes") == 0) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long bytes = std::strtoull(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0') {
      nbdkit_error("eraid: crc-cache-bytes=%s: want a number of bytes (0: no bound)", value);
      return -1;
    }
    g_crc_cache_bytes = bytes;
    return 0;
  }
  nbdkit_error("eraid: unknown parameter '%s' (expected dir=DIR [socket=PATH] [crc-cache-bytes=N])",
               key);
  return -1;
}

int ConfigComplete() {
  if (g_dir.empty()) {
    nbdkit_error("eraid: dir=DIR is required");
    return -1;
  }
  return 0;
}

// Only checks: nbdkit forks into the background after get_ready unless run with -f (as
// `eraid serve` runs it), and the threads an open starts (the drives' workers, the row
// writer, remote drives' pollers) would not exist in the child — `nbdkit eraid dir=DIR`
// then aborted at unload, joining threads of the parent. The array opens in AfterFork.
int GetReady() {
  eraid::Status s = eraid::ArrayDir::Probe(g_dir);
  return s.ok() ? 0 : Fail(s);
}

// After nbdkit has (perhaps) forked into the background: the open and every thread.
int AfterFork() {
  auto a = eraid::ArrayDir::Open(g_dir);
  if (!a.ok()) return Fail(a.status());
  g_array = std::move(a).value();
  // The open's tables came in huge pages (eraid serve sets glibc.malloc.hugetlb: ~7x fewer
  // page faults at open); what grows while serving comes in 4 KiB pages, so that a table
  // grown by one entry is not resident 2 MiB at a time (with huge pages throughout, a
  // random write's memory per block grew ~25%: scale-bench, 2026-12-06).
  ::prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
  g_array->array().set_crc_cache_bytes(g_crc_cache_bytes);
  // In the server's log (DIR/serve.log when run with --daemon), and in `eraid status`.
  const eraid::ArrayDir::OpenTimes& t = g_array->open_times();
  std::fprintf(
      stderr, "eraid: opened %s in %.2f s%s (drives %.2f s, array %.2f s, log %.2f s)\n",
      g_dir.c_str(), t.total_seconds,
      t.crashed_drives
          ? (", a crash recovery of " + std::to_string(t.crashed_drives) + " drive(s)").c_str()
          : " after a clean stop",
      t.drives_seconds, t.array_seconds, t.volume_seconds);
  g_array->StartServing();
  g_admin = std::make_unique<eraid::AdminServer>(*g_array, [] { nbdkit_shutdown(); });
  eraid::Status s = g_admin->Start();
  return s.ok() ? 0 : Fail(s);
}

void Unload() {
  // Before the array closes (which releases its lock): whoever waits for the lock to go
  // finds the socket gone too.
  if (!g_socket.empty()) unlink(g_socket.c_str());
  if (g_admin) g_admin->Stop();
  g_admin.reset();
  if (g_array) {
    eraid::Status s = g_array->Close();
    if (!s.ok()) nbdkit_error("eraid: close: %s", s.ToString().c_str());
    g_array.reset();
  }
}

// A connection: the volume its export name chose ("" or "default": the default one).
struct Conn {
  std::shared_ptr<eraid::NamedVolumes::Handle> volume;
};

eraid::NamedVolumes& Vols() { return g_array->volumes(); }
eraid::NamedVolumes::Handle& Vol(void* h) { return *static_cast<Conn*>(h)->volume; }

void* Open(int) {
  const char* name = nbdkit_export_name();
  auto v = Vols().Open(name ? name : "");
  if (!v.ok()) {
    nbdkit_error("eraid: %s", v.status().ToString().c_str());
    nbdkit_set_error(ENOENT);
    return nullptr;
  }
  return new Conn{std::move(v).value()};
}

void Close(void* h) { delete static_cast<Conn*>(h); }

int ListExports(int, int, struct nbdkit_exports* exports) {
  for (const eraid::VolumeReport& r : Vols().List()) {
    const std::string desc =
        std::to_string(eraid::BlocksToBytes(r.size_blocks) >> 20) + " MiB eraid volume";
    if (nbdkit_add_export(exports, r.name.c_str(), desc.c_str()) == -1) return -1;
  }
  return 0;
}

int64_t GetSize(void* h) {
  return static_cast<int64_t>(eraid::BlocksToBytes(Vols().size_blocks(Vol(h))));
}

int BlockSize(void*, uint32_t* minimum, uint32_t* preferred, uint32_t* maximum) {
  *minimum = eraid::kBlockSize;
  *preferred = eraid::kBlockSize;
  *maximum = 32 << 20;
  return 0;
}

int Pread(void* h, void* buf, uint32_t count, uint64_t offset, uint32_t) {
  if (!Aligned(offset, count)) return Fail(eraid::Status::InvalidArgument("misaligned read"));
  eraid::Status s =
      Vols().Read(Vol(h), offset / eraid::kBlockSize, {static_cast<std::byte*>(buf), count});
  return s.ok() ? 0 : Fail(s);
}

int Pwrite(void* h, const void* buf, uint32_t count, uint64_t offset, uint32_t flags) {
  if (!Aligned(offset, count)) return Fail(eraid::Status::InvalidArgument("misaligned write"));
  eraid::Status s =
      Vols().Write(Vol(h), offset / eraid::kBlockSize, {static_cast<const std::byte*>(buf), count});
  if (s.ok() && (flags & NBDKIT_FLAG_FUA)) s = g_array->volume().Flush();
  return s.ok() ? 0 : Fail(s);
}

int Flush(void*, uint32_t) {
  eraid::Status s = g_array->volume().Flush();
  return s.ok() ? 0 : Fail(s);
}

int Trim(void* h, uint32_t count, uint64_t offset, uint32_t flags) {
  if (!Aligned(offset, count)) return Fail(eraid::Status::InvalidArgument("misaligned trim"));
  eraid::Status s = Vols().Trim(Vol(h), offset / eraid::kBlockSize, count / eraid::kBlockSize);
  if (s.ok() && (flags & NBDKIT_FLAG_FUA)) s = g_array->volume().Flush();
  return s.ok() ? 0 : Fail(s);
}

// A zeroed range is unmapped (reads of it return zeros): as fast as a trim, so
// NBD_CMD_FLAG_FAST_ZERO is always honoured, whether the client allows a trim or not.
int Zero(void* h, uint32_t count, uint64_t offset, uint32_t flags) {
  return Trim(h, count, offset, flags);
}

// Block status (base:allocation) from the volume's map: unwritten and trimmed blocks are
// holes that read as zeros, so nbdcopy and qemu-img skip them.
int Extents(void* h, uint32_t count, uint64_t offset, uint32_t flags,
            struct nbdkit_extents* extents) {
  const uint64_t first = offset / eraid::kBlockSize;
  const uint64_t end_byte = offset + count;
  const uint64_t blocks = (end_byte + eraid::kBlockSize - 1) / eraid::kBlockSize - first;
  const uint64_t cap = Vols().size_blocks(Vol(h));
  if (count == 0 || first >= cap || blocks > cap - first)
    return Fail(eraid::Status::InvalidArgument("extents beyond the volume"));
  uint64_t at = eraid::BlocksToBytes(first);
  for (const eraid::LogVolume::Run& r : Vols().Allocation(Vol(h), first, blocks)) {
    const uint64_t start = std::max(at, offset),
                   end = std::min(at + eraid::BlocksToBytes(r.blocks), end_byte);
    const uint32_t type = r.written ? 0 : NBDKIT_EXTENT_HOLE | NBDKIT_EXTENT_ZERO;
    if (end > start && nbdkit_add_extent(extents, start, end - start, type) == -1) return -1;
    at += eraid::BlocksToBytes(r.blocks);
    if (flags & NBDKIT_FLAG_REQ_ONE) break;
  }
  return 0;
}

int CanYes(void*) { return 1; }
int CanFua(void*) { return NBDKIT_FUA_NATIVE; }

}  // namespace

static struct nbdkit_plugin plugin = [] {
  struct nbdkit_plugin p {};
  p.name = "eraid";
  p.longname = "eraid elastic RAID volume";
  p.version = "0.1";
  p.description = "A SepBIT log volume over an elastic RAID of compressing drives";
  p.config = Config;
  p.config_complete = ConfigComplete;
  p.config_help =
      "dir=<DIR>       (required) an array directory made by `eraid create`\n"
      "socket=<PATH>   the --unix socket, removed when the server exits\n"
      "crc-cache-bytes=<N> RAM for sealed segments' block CRCs (0: no bound; default 32 MiB)";
  p.get_ready = GetReady;
  p.after_fork = AfterFork;
  p.unload = Unload;
  p.open = Open;
  p.close = Close;
  p.list_exports = ListExports;
  p.get_size = GetSize;
  p.block_size = BlockSize;
  p.pread = Pread;
  p.pwrite = Pwrite;
  p.flush = Flush;
  p.trim = Trim;
  p.zero = Zero;
  p.extents = Extents;
  p.can_write = CanYes;
  p.can_flush = CanYes;
  p.can_trim = CanYes;
  p.can_zero = CanYes;
  p.can_fast_zero = CanYes;
  p.can_extents = CanYes;
  p.can_fua = CanFua;
  p.can_multi_conn = CanYes;  // one volume behind every connection: a flush covers all
  return p;
}();

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
NBDKIT_REGISTER_PLUGIN(plugin)
