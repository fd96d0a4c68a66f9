#include "tools/server/admin.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <sstream>
#include <thread>

#include "common/thread_priority.h"
#include "tools/server/admin_internal.h"

namespace eraid {

// One admin request: the words (verb first, --json taken out), the array, and what the
// caller passed along.
struct AdminRequest {
  ArrayDir& array;
  AdminState& state;
  const AdminVerb& verb;
  const std::vector<std::string>& words;
  bool json;
  const std::function<void(double)>& progress;
  const std::function<bool()>& cancelled;
  // Word i (1: the first after the verb), or its argument's fallback when not given.
  std::string word(size_t i) const {
    if (i < words.size()) return words[i];
    return i - 1 < verb.args.size() && verb.args[i - 1].fallback ? verb.args[i - 1].fallback : "";
  }
  // The reply: `text` for people, `j` with --json.
  AdminReply Done(const std::string& text, const Json& j) const {
    return {0, json ? j.dump() + "\n" : text + "\n"};
  }
};

namespace {

constexpr const char* kMagic = "eraid-admin 1";
constexpr size_t kMaxRequest = 4096;

using namespace admin_internal;  // NOLINT: the admin commands' own helpers

// status
AdminReply RunStatus(const AdminRequest& c) { return StatusReport(c.array, c.state, c.json); }

// volume list | create NAME SIZE | resize NAME SIZE | delete NAME
AdminReply RunVolume(const AdminRequest& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  return VolumeCommand(a, words, c.json);
}

// inspect [BINS]
AdminReply RunInspect(const AdminRequest& c) {
  auto bins = ParseIndex(c.word(1), 1001, "bins");
  if (!bins.ok() || *bins == 0) return Error(2, "bins must be 1..1000");
  return InspectReport(c.array, c.json, *bins);
}

// fail DEVICE
AdminReply RunFail(const AdminRequest& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  const uint32_t devices = a.array().geometry().devices;
  auto d = ParseIndex(words[1], devices, "device");
  if (!d.ok()) return Error(2, d.status().message());
  Status s = a.array().FailDevice(DeviceIndex(*d));
  if (!s.ok()) return Error(1, s.ToString());
  return c.Done(
      "device " + words[1] + " failed; the array runs degraded",
      Json::object({{"failed", *d},
                    {"health", a.array().stats().data_at_risk ? "data-at-risk" : "degraded"}}));
}

// set-io-timeout MILLISECONDS
AdminReply RunSetIoTimeout(const AdminRequest& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  auto ms = ParseIndex(words[1], 86400001, "milliseconds");
  if (!ms.ok()) return Error(2, ms.status().message());
  Status s = a.SetIoTimeout(static_cast<uint32_t>(*ms));
  if (!s.ok()) return Error(s.code() == StatusCode::kInvalidArgument ? 2 : 1, s.ToString());
  return c.Done("io timeout " + words[1] + " ms, on every remote drive's connection now",
                Json::object({{"io_timeout_ms", *ms}}));
}

// replace DEVICE [PATH [RATE]] | re-add DEVICE [RATE]
AdminReply RunRebuild(const AdminRequest& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  const std::string& verb = words[0];
  const uint32_t devices = a.array().geometry().devices;
  AdminState& state = c.state;
  const std::function<void(double)>& progress = c.progress;
  auto d = ParseIndex(words[1], devices, "device");
  if (!d.ok()) return Error(2, d.status().message());
  auto rate = ParseSize(c.word(verb == "replace" ? 3 : 2));
  if (!rate.ok()) return Error(2, "bad --rate: " + rate.status().message());
  // One rebuild at a time; its progress in `state` (for status) and on the caller's line.
  int expected = -1;
  if (!state.rebuilding_device.compare_exchange_strong(expected, static_cast<int>(*d))) {
    return Error(1, "device " + std::to_string(expected) + " is being rebuilt already");
  }
  state.rebuild_done = 0;
  state.rebuild_total = a.array().geometry().segments;
  LowerThisThreadPriority();  // this request's own thread: the rebuild yields to user I/O
  auto report = [&](const RebuildProgress& p) {
    state.rebuild_done = p.segments_done;
    state.rebuild_total = p.segments_total;
    state.rebuild_bytes = p.bytes_written;
    if (progress && p.segments_total) progress(double(p.segments_done) / p.segments_total);
  };
  const auto start = std::chrono::steady_clock::now();
  Result<ReAddReport> readd = ReAddReport{};
  Status s;
  if (verb == "replace") {
    s = a.Replace(DeviceIndex(*d), c.word(2), *rate, report);
  } else {
    readd = a.ReAdd(DeviceIndex(*d), *rate, report);
    s = readd.status();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t bytes = state.rebuild_bytes;
  state.rebuilding_device = -1;
  // A drive re-add refuses (another one, an older image) is the caller's mistake: 2.
  if (!s.ok())
    return Error(verb == "re-add" && s.code() == StatusCode::kInvalidArgument ? 2 : 1,
                 s.ToString());
  Json j = Json::object({{"device", *d}, {"path", Shown(a.device_path(*d))}});
  if (verb == "replace") {
    j["bytes"] = bytes;
    j["seconds"] = Figure(secs);
    return c.Done("device " + words[1] + " rebuilt onto " + Shown(a.device_path(*d)) + ": " +
                      Mib(bytes) + " in " + Fixed(secs, 2) + " s",
                  j);
  }
  const ReAddReport& r = *readd;
  j.update(Json::object({{"resynced_bytes", r.resynced_bytes},
                         {"total_bytes", r.total_bytes},
                         {"segments_resynced", r.segments_resynced},
                         {"segments_total", r.segments_total},
                         {"seconds", Figure(secs)}}));
  return c.Done("device " + words[1] + " re-added: " + Mib(r.resynced_bytes) + " resynced of " +
                    Mib(r.total_bytes) + " (" + std::to_string(r.segments_resynced) + " of " +
                    std::to_string(r.segments_total) + " segments) in " + Fixed(secs, 2) + " s",
                j);
}

// scrub
AdminReply RunScrub(const AdminRequest& c) {
  ArrayDir& a = c.array;
  LowerThisThreadPriority();
  auto r = a.array().Scrub();
  if (!r.ok()) return Error(1, r.status().ToString());
  const ScrubReport& rep = *r;
  const uint64_t mismatches = rep.crc_mismatches + rep.parity_mismatches + rep.mirror_mismatches;
  std::string t =
      "scrub: " + std::to_string(rep.segments) + " segments, " +
      std::to_string(rep.blocks_checked) + " blocks checked, " + std::to_string(mismatches) +
      " mismatches (" + std::to_string(rep.crc_mismatches) + " CRC, " +
      std::to_string(rep.parity_mismatches) + " parity, " + std::to_string(rep.mirror_mismatches) +
      " mirror), " + std::to_string(rep.repaired) + " repaired, " +
      std::to_string(rep.unrepairable) + " unrepairable";
  for (const std::string& f : rep.findings) t += "\n  " + f;
  AdminReply reply = c.Done(t, Json::object({{"segments", rep.segments},
                                             {"blocks_checked", rep.blocks_checked},
                                             {"mismatches", mismatches},
                                             {"crc_mismatches", rep.crc_mismatches},
                                             {"parity_mismatches", rep.parity_mismatches},
                                             {"mirror_mismatches", rep.mirror_mismatches},
                                             {"repaired", rep.repaired},
                                             {"unrepairable", rep.unrepairable}}));
  if (rep.unrepairable > 0) reply.rc = 1;
  return reply;
}

// convert raid5|raid10 SEGMENT|all [RATE]
AdminReply RunConvert(const AdminRequest& c) {
  ArrayDir& a = c.array;
  const std::vector<std::string>& words = c.words;
  const std::function<void(double)>& progress = c.progress;
  const std::function<bool()>& cancelled = c.cancelled;
  SegmentScheme to;
  if (words[1] == "raid5")
    to = SegmentScheme::kRaid5;
  else if (words[1] == "raid10")
    to = SegmentScheme::kRaid10;
  else
    return Error(2, "--to must be raid5 or raid10, not '" + words[1] + "'");
  const uint32_t segments = a.array().geometry().segments;
  uint32_t first = 0, last = segments;
  const std::string segment = c.word(2);
  if (segment != "all") {
    auto s = ParseIndex(segment, segments, "segment");
    if (!s.ok()) return Error(2, s.status().message());
    first = *s;
    last = *s + 1;
    const SegmentInfo si = a.array().segment_info(SegmentId(first));
    if (!si.sealed) return Error(1, "segment " + segment + " is not sealed (free or still open)");
  }
  auto parsed_rate = ParseSize(c.word(3));
  if (!parsed_rate.ok()) return Error(2, "bad --rate: " + parsed_rate.status().message());
  const uint64_t rate = *parsed_rate;
  LowerThisThreadPriority();
  // Paced over the user bytes converted: before each segment, wait until the bytes so
  // far are due at `rate` (the scheduler's throttle counts the same bytes).
  const auto start = std::chrono::steady_clock::now();
  uint32_t converted = 0, skipped = 0;
  uint64_t bytes = 0;
  bool stopped = false;
  for (uint32_t i = first; i < last; ++i) {
    if (cancelled && cancelled()) {
      stopped = true;
      break;
    }
    const SegmentInfo si = a.array().segment_info(SegmentId(i));
    if (si.sealed && si.scheme != to) {
      if (rate > 0) {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(double(bytes) / double(rate))));
      }
      Status s = a.array().Convert(SegmentId(i), to);
      if (s.ok()) {
        ++converted;
        bytes += BlocksToBytes(si.frontier);
      } else if (last - first == 1) {
        return Error(1, s.ToString());
      } else {
        ++skipped;  // freed by GC meanwhile
      }
    }
    if (progress) progress(double(i - first + 1) / double(last - first));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c.Done("converted " + std::to_string(converted) + " segments (" + Mib(bytes) + ") to " +
                    words[1] + " in " + Fixed(secs, 2) + " s" +
                    (skipped ? " (" + std::to_string(skipped) + " went away meanwhile)" : "") +
                    (stopped ? " (stopped: the client went away)" : ""),
                Json::object({{"converted", converted},
                              {"skipped", skipped},
                              {"to", words[1]},
                              {"bytes", bytes},
                              {"seconds", Figure(secs)}}));
}

// The arguments of the verbs (AdminVerb::args).
constexpr AdminArg kDevice{"device", "device index", nullptr, AdminArg::kNumber};
constexpr AdminArg kFailArgs[] = {kDevice};
constexpr AdminArg kReplaceArgs[] = {
    kDevice,
    {"with", "a new file, block device or NBD URI for the drive (required for a remote drive)", ""},
    {"rate", "rebuild write rate limit, bytes/s (e.g. 100M; 0 = none)", "0"}};
constexpr AdminArg kReAddArgs[] = {
    kDevice, {"rate", "resync write rate limit, bytes/s (e.g. 100M; 0 = none)", "0"}};
constexpr AdminArg kConvertArgs[] = {
    {"to", "raid5 | raid10", nullptr},
    {"segment", "a segment index, or all", "all"},
    {"rate", "conversion rate limit, user bytes/s (e.g. 100M; 0 = none)", "0"}};
constexpr AdminArg kInspectArgs[] = {
    {"bins", "histogram bins over the volume's LBAs (1..1000)", "20", AdminArg::kNumber, 1, 1000}};
constexpr AdminArg kVolumeArgs[] = {{"what", "list | create | resize | delete", nullptr}};
constexpr AdminArg kIoTimeoutArgs[] = {
    {"milliseconds", "the remote drives' I/O timeout", nullptr, AdminArg::kNumber, 0, 86400000}};

constexpr AdminVerb kVerbs[] = {
    {"status",
     "health, devices, capacity, physical use, compression, RAID10 coverage, WA",
     "eraid status --dir DIR [--json] [--interval N [--count K]]\nHealth, devices, capacity, "
     "physical use, compression, RAID10 coverage, WA per layer, rebuild progress.\nWith "
     "--interval: while served, one line per N seconds with that interval's writes and WA per "
     "layer (like iostat),\nand each volume's reads and writes per second.",
     {},
     false,
     /*watches=*/true,
     false,
     RunStatus},
    {"fail", "fail a device (failure injection); the array runs degraded",
     "eraid fail --dir DIR --device K\nFails device K (failure injection): the array goes on "
     "degraded.",
     kFailArgs, false, false, false, RunFail},
    {"replace", "rebuild a device onto a fresh drive, online",
     "eraid replace --dir DIR --device K [--with PATH|URI] [--rate BYTES/s]\nRebuilds device K "
     "onto a fresh drive (a new file in place of its own, or PATH, or an NBD export), online.",
     kReplaceArgs, /*long_running=*/true, false, false, RunRebuild},
    {"re-add", "bring back a drive failed by an outage, resyncing only what changed since",
     "eraid re-add --dir DIR --device K [--rate BYTES/s] [--json]\nBrings back device K, failed "
     "by an outage (a drive host down, a link cut), on its own drive:\nchecks it is the drive "
     "that left, then rebuilds only the segments written, converted or freed since.\nRefused "
     "for a drive that is another one or an older image, or failed before the server started: "
     "use replace.",
     kReAddArgs, /*long_running=*/true, false, false, RunRebuild},
    {"scrub",
     "read every block and check CRCs, parity and mirrors; repair what it can",
     "eraid scrub --dir DIR [--json]\nReads every block, checks CRCs, parity and mirrors; "
     "repairs what it can. Exit 1 if anything is unrepairable.",
     {},
     false,
     false,
     false,
     RunScrub},
    {"convert", "convert segments to RAID5 or RAID10",
     "eraid convert --dir DIR --to raid5|raid10 [--segment S] [--rate BYTES/s]\nConverts one "
     "sealed segment, or all of them (paced to --rate user bytes per second).",
     kConvertArgs, /*long_running=*/true, false, false, RunConvert},
    {"inspect", "dump the superblock, bitmap and segment table",
     "eraid inspect --dir DIR [--json] [--bins N]\nDumps the superblock, the bitmap and the "
     "segment table: each segment's scheme, compression,\nthe LBAs of its valid blocks (lowest, "
     "highest, and with --json a histogram over N equal parts of\nthe volume) and, while "
     "served, its hotness (decayed accesses, and per written block).",
     kInspectArgs, false, false, false, RunInspect},
    // `eraid volume` and `eraid set` have options of their own and send these.
    {"volume", nullptr, nullptr, kVolumeArgs, false, false, /*variadic=*/true, RunVolume},
    {"set-io-timeout", nullptr, nullptr, kIoTimeoutArgs, false, false, false, RunSetIoTimeout},
};

}  // namespace

AdminReply RunAdmin(ArrayDir& a, AdminState& state, const std::vector<std::string>& in,
                    const std::function<void(double)>& progress,
                    const std::function<bool()>& cancelled) {
  std::vector<std::string> words;
  bool json = false;
  for (const std::string& w : in) {
    if (w == "--json")
      json = true;
    else
      words.push_back(w);
  }
  if (words.empty()) return Error(2, "no command");
  for (const AdminVerb& verb : kVerbs) {
    if (words[0] != verb.name || words.size() < verb.min_words() || words.size() > verb.max_words())
      continue;
    return verb.run(AdminRequest{a, state, verb, words, json, progress, cancelled});
  }
  return Error(2, "unknown or malformed admin command '" + words[0] + "' (" +
                      std::to_string(words.size()) + " words)");
}

size_t AdminVerb::min_words() const {
  size_t n = 1;
  for (const AdminArg& arg : args) n += arg.fallback == nullptr;
  return n;
}

size_t AdminVerb::max_words() const { return variadic ? 64 : 1 + args.size(); }

std::span<const AdminVerb> AdminVerbs() { return kVerbs; }

std::optional<std::string> CheckAdminArg(const AdminArg& arg, const std::string& word) {
  if (arg.kind != AdminArg::kNumber) return std::nullopt;
  const bool digits = !word.empty() && word.size() <= 19 &&
                      word.find_first_not_of("0123456789") == std::string::npos;
  const uint64_t v = digits ? std::stoull(word) : 0;
  if (digits && v >= arg.min && v <= arg.max) return std::nullopt;
  const std::string name = std::string("--") + arg.name;
  if (arg.max == UINT64_MAX) return name + " must be a whole number >= " + std::to_string(arg.min);
  return name + " must be " + std::to_string(arg.min) + ".." + std::to_string(arg.max);
}

std::string AdminSocketPath(const std::string& dir) { return dir + "/admin.sock"; }

namespace {

bool WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads one '\n'-terminated line of at most `limit` bytes (without the newline).
bool ReadLine(int fd, std::string* line, size_t limit) {
  line->clear();
  char c;
  while (line->size() <= limit) {
    ssize_t n = ::recv(fd, &c, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

sockaddr_un Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

}  // namespace

Result<AdminReply> AdminCall(const std::string& dir, const std::vector<std::string>& words,
                             const std::function<void(double)>& progress) {
  const std::string path = AdminSocketPath(dir);
  if (path.size() >= sizeof(sockaddr_un::sun_path))
    return Status::InvalidArgument("directory path too long for a socket");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr = Address(path);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED) return Status::NotFound("no server on " + path);
    return Status::IoError("connect " + path + ": " + std::strerror(e));
  }
  std::string request = kMagic;
  for (const std::string& w : words) {
    if (w.find_first_of("\t\n") != std::string::npos) {
      ::close(fd);
      return Status::InvalidArgument("arguments may not contain tabs or newlines");
    }
    request += "\t" + w;
  }
  request += "\n";
  if (!WriteAll(fd, request)) {
    ::close(fd);
    return Status::IoError("admin socket closed while sending");
  }
  std::string line;
  while (ReadLine(fd, &line, kMaxRequest)) {
    if (line.rfind("progress ", 0) == 0) {
      if (progress) progress(std::atof(line.c_str() + 9));
      continue;
    }
    int rc = 0;
    unsigned long long len = 0;
    if (std::sscanf(line.c_str(), "result %d %llu", &rc, &len) != 2) break;
    AdminReply reply{rc, std::string(len, '\0')};
    size_t off = 0;
    while (off < len) {
      ssize_t n = ::recv(fd, reply.text.data() + off, len - off, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::close(fd);
    if (off < len) return Status::IoError("admin reply truncated");
    return reply;
  }
  ::close(fd);
  return Status::IoError("admin socket closed without a reply (did the server stop?)");
}

AdminServer::AdminServer(ArrayDir& array, std::function<void()> on_shutdown)
    : array_(array), on_shutdown_(std::move(on_shutdown)), path_(AdminSocketPath(array.dir())) {}

AdminServer::~AdminServer() { Stop(); }

Status AdminServer::Start() {
  if (path_.size() >= sizeof(sockaddr_un::sun_path))
    return Status::InvalidArgument("directory path too long for a socket");
  ::unlink(path_.c_str());  // left by a server that was killed: the array lock says none runs
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr = Address(path_);
  const mode_t old = ::umask(0177);  // the socket is created 0600: only the owner administers
  const int rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::umask(old);
  if (rc != 0 || ::chmod(path_.c_str(), 0600) != 0 || ::listen(listen_fd_, 16) != 0) {
    return Status::IoError("admin socket " + path_ + ": " + std::strerror(errno));
  }
  acceptor_ = std::thread([this] {
    NameThisThread("eraid-admin");
    Loop();
  });
  return Status::Ok();
}

void AdminServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard lock(mu_);
    for (int fd : open_fds_)
      ::shutdown(fd, SHUT_RDWR);  // unblocks reads; a running command finishes
  }
  for (Worker& w : workers_) w.thread.join();
  workers_.clear();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
  listen_fd_ = -1;
}

void AdminServer::Loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    open_fds_.push_back(fd);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (*it->done) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back({std::thread([this, fd, done] {
                          NameThisThread("eraid-admin");
                          Serve(fd);
                          *done = true;
                        }),
                        done});
  }
}

void AdminServer::Serve(int fd) {
  std::string line;
  std::vector<std::string> words;
  AdminReply reply;
  bool shutdown = false;
  if (!ReadLine(fd, &line, kMaxRequest)) {
    reply = Error(
        2, "malformed admin request: no line of at most " + std::to_string(kMaxRequest) + " bytes");
  } else {
    words = Split(line, '\t');
    if (words.empty() || words[0] != kMagic) {
      reply = Error(2, "malformed admin request: it must start with '" + std::string(kMagic) + "'");
    } else {
      words.erase(words.begin());
      if (words.size() == 1 && words[0] == "shutdown") {
        reply = {0, "shutting down\n"};
        shutdown = true;
      } else {
        bool gone = false;
        reply = RunAdmin(
            array_, state_, words,
            [&](double f) { gone = gone || !WriteAll(fd, "progress " + Fixed(f, 4) + "\n"); },
            [&] { return gone; });
      }
    }
  }
  WriteAll(fd, "result " + std::to_string(reply.rc) + " " + std::to_string(reply.text.size()) +
                   "\n" + reply.text);
  {
    std::lock_guard lock(mu_);
    std::erase(open_fds_, fd);
    ::close(fd);
  }
  if (shutdown && on_shutdown_) on_shutdown_();
}

}  // namespace eraid
