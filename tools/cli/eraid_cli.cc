// eraid: the administration command. `eraid SUBCOMMAND --help` describes each one.
//   create, serve, stop          make an array; serve it over NBD (nbdkit); stop serving
//   status, fail, replace,       administer it: through the admin socket of the server
//   scrub, convert, inspect      that serves it, or offline when none does
//   demo                         the README's first command (tools/demo.cc)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <thread>

#include "tools/cli/demo.h"
#include "tools/cli/options.h"
#include "tools/cli/progress.h"
#include "tools/json.h"
#include "tools/server/admin.h"
#include "tools/server/array_dir.h"
#include "tools/server/serve.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

int Usage(std::ostream& out, int rc) {
  out << "usage: eraid SUBCOMMAND [options]   (eraid SUBCOMMAND --help for its options)\n"
         "subcommands:\n"
         "  create    make an array of emulated compressing drives (over files, devices or NBD "
         "exports)\n"
         "  serve     serve an array over NBD with nbdkit (Unix socket, mode 0600)\n"
         "  stop      stop the server of an array\n"
         "  set       change a setting of an array not being served (the remote drives' I/O "
         "timeout)\n";
  for (const AdminVerb& verb : AdminVerbs()) {
    if (verb.summary != nullptr)
      out << "  " << std::left << std::setw(10) << verb.name << verb.summary << "\n";
  }
  out << "  volume    create, list, resize or delete the array's named volumes (NBD exports)\n"
         "  demo      fio over NBD on emulated drives: fail a drive mid-run, rebuild, summary\n";
  return rc;
}

// Parses a subcommand's options. Returns -1 to go on, else the exit code.
int Parse(const std::string& name, po::options_description& desc, int argc, char** argv,
          po::variables_map* vm) {
  return ParseOptions("eraid " + name, desc, argc, argv, vm);
}

int Die(const std::string& name, const Status& s, int rc = 1) {
  std::cerr << "eraid " << name << ": " << s.message() << "\n";
  return rc;
}

// Runs an admin command on the serving array, or offline on the array itself.
int Admin(const std::string& name, const std::string& dir, std::vector<std::string> words,
          bool json, bool progress_bar) {
  if (json) words.push_back("--json");
  std::optional<ProgressBar> bar;
  if (progress_bar) bar.emplace(name);
  auto progress = [&](double f) {
    if (bar) bar->Update(f);
  };
  auto reply = AdminCall(dir, words, progress);
  if (!reply.ok() && reply.status().code() == StatusCode::kNotFound) {
    auto a = ArrayDir::Open(dir);
    if (!a.ok()) return Die(name, a.status());
    AdminState state;
    reply = RunAdmin(**a, state, words, progress);
    if (Status s = (*a)->Close(); !s.ok() && reply.ok() && reply->rc == 0) return Die(name, s);
  }
  bar.reset();
  if (!reply.ok()) return Die(name, reply.status());
  (reply->rc == 0 ? std::cout : std::cerr)
      << (reply->rc == 0 ? "" : "eraid " + name + ": ") << reply->text;
  return reply->rc;
}

// `eraid status --interval N`: differences of the served array's counters, one line per
// interval. A WA over less than 1 MiB of the interval's writes is "-" (JSON null).
int StatusInterval(const std::string& dir, double interval, uint64_t count, bool json) {
  const char* keys[] = {"user_written_bytes",  "gc_written_bytes",    "raid_written_bytes",
                        "device_stored_bytes", "flash_written_bytes", "trimmed_bytes"};
  // Per volume: its request counts (name -> reads, writes), from status's "volumes" list.
  using Requests = std::map<std::string, std::pair<double, double>>;
  auto sample = [&](std::array<double, 6>* out, Requests* vols) -> Status {
    ERAID_ASSIGN_OR_RETURN(AdminReply r, AdminCall(dir, {"status", "--json"}, nullptr));
    if (r.rc != 0) return Status::IoError(r.text);
    const Json j = Json::parse(r.text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("counters") || !j.contains("volumes"))
      return Status::Corruption("status --json: not the reply expected: " + r.text);
    for (size_t i = 0; i < 6; ++i) (*out)[i] = j["counters"].value(keys[i], 0.0);
    vols->clear();
    for (const Json& v : j["volumes"])
      (*vols)[v.value("name", "")] = {v.value("read_requests", 0.0),
                                      v.value("write_requests", 0.0)};
    return Status::Ok();
  };
  std::array<double, 6> prev{}, cur{};
  Requests prev_vols, cur_vols;
  if (Status s = sample(&prev, &prev_vols); !s.ok()) {
    if (s.code() == StatusCode::kNotFound)
      s = Status::NotFound("--interval needs the array served (eraid serve --dir " + dir + ")");
    return Die("status", s);
  }
  auto wa = [](double w, double over) {
    return over < double(1 << 20) ? std::numeric_limits<double>::quiet_NaN() : w / over;
  };
  auto fixed = [](double v, int digits) {
    if (std::isnan(v)) return std::string("-");
    char b[32];
    std::snprintf(b, sizeof(b), "%.*f", digits, v);
    return std::string(b);
  };
  if (!json)
    std::printf("%8s %10s %10s %10s %8s %8s %8s\n", "seconds", "user MB/s", "GC MB/s", "trim MB/s",
                "log WA", "RAID WA", "dev WAF");
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  for (uint64_t line = 0; count == 0 || line < count; ++line) {
    std::this_thread::sleep_until(last + std::chrono::duration<double>(interval));
    if (Status s = sample(&cur, &cur_vols); !s.ok()) return Die("status", s);
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - last).count();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    last = now;
    std::array<double, 6> d{};
    for (size_t i = 0; i < 6; ++i) d[i] = cur[i] - prev[i];
    prev = cur;
    // Each volume's read and write requests per second (a volume made meanwhile from 0).
    Json vol_json = Json::array();
    std::string vol_text;
    for (const auto& [name, rw] : cur_vols) {
      const auto p = prev_vols.count(name) ? prev_vols[name] : std::pair<double, double>{0, 0};
      const double r = (rw.first - p.first) / secs, w = (rw.second - p.second) / secs;
      vol_json.push_back(Json::object(
          {{"name", name}, {"read_iops", std::llround(r)}, {"write_iops", std::llround(w)}}));
      vol_text +=
          "         " + name + ": " + fixed(r, 0) + " reads/s, " + fixed(w, 0) + " writes/s\n";
    }
    prev_vols = cur_vols;
    const double log_wa = wa(d[0] + d[1], d[0]), raid_wa = wa(d[2], d[0] + d[1]),
                 dev_waf = wa(d[4], d[3]);
    if (json) {
      const Json line = Json::object({{"seconds", std::round(elapsed * 1000) / 1000},
                                      {"user_bytes_per_sec", std::llround(d[0] / secs)},
                                      {"gc_bytes_per_sec", std::llround(d[1] / secs)},
                                      {"trimmed_bytes_per_sec", std::llround(d[5] / secs)},
                                      {"wa", Json::object({{"log", Figure(log_wa)},
                                                           {"raid", Figure(raid_wa)},
                                                           {"device", Figure(dev_waf)}})},
                                      {"volumes", vol_json}});
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("%8.1f %10.2f %10.2f %10.2f %8s %8s %8s\n", elapsed, d[0] / secs / 1e6,
                  d[1] / secs / 1e6, d[5] / secs / 1e6, fixed(log_wa, 3).c_str(),
                  fixed(raid_wa, 3).c_str(), fixed(dev_waf, 3).c_str());
      std::fputs(vol_text.c_str(), stdout);
    }
    std::fflush(stdout);
  }
  return 0;
}

// eraid volume create|list|resize|delete --dir DIR [--name NAME] [--size SIZE] [--json]
int VolumeCommand(int argc, char** argv) {
  const std::string synopsis =
      "eraid volume create|list|resize|delete --dir DIR [--name NAME] [--size SIZE] [--json]\n"
      "Named, thinly provisioned volumes on the array, each an NBD export by name\n"
      "(nbd+unix:///NAME?socket=DIR/nbd.sock; the default volume is the default export). Works\n"
      "while served and offline. Sizes may add up to 4x what the array holds; space is taken as\n"
      "written and given back by trims and deletes. A volume open by a connection is not deleted.";
  const std::string op = argc >= 2 ? argv[1] : "";
  if (op == "--help" || op == "-h") {
    std::cout << synopsis << "\n";
    return 0;
  }
  if (op != "create" && op != "list" && op != "resize" && op != "delete") {
    return Die("volume",
               Status::InvalidArgument("give create, list, resize or delete (eraid volume --help)"),
               2);
  }
  std::string dir, name, size;
  bool json = false;
  po::options_description desc(synopsis + "\noptions");
  desc.add_options()("help,h", "this text")("dir", po::value(&dir)->required(),
                                            "the array directory")(
      "name", po::value(&name), "the volume (create, resize, delete)")(
      "size", po::value(&size), "its size (create, resize), e.g. 512M, 2G")(
      "json", po::bool_switch(&json), "print JSON");
  po::variables_map vm;
  if (int rc = Parse("volume " + op, desc, argc - 1, argv + 1, &vm); rc >= 0) return rc;
  std::vector<std::string> words{"volume", op};
  if (op != "list") {
    if (name.empty())
      return Die("volume", Status::InvalidArgument("--name is required to " + op), 2);
    words.push_back(name);
  }
  if (op == "create" || op == "resize") {
    if (size.empty())
      return Die("volume", Status::InvalidArgument("--size is required to " + op), 2);
    words.push_back(size);
  } else if (!size.empty()) {
    return Die("volume", Status::InvalidArgument("--size is only for create and resize"), 2);
  }
  return Admin("volume", dir, words, json, false);
}

// --drive-model SPEC [--time-scale X]: the profile, with the scale given on its own
// (overriding one in the spec). `given_scale` < 0: not given.
Result<DriveProfile> DriveModelOption(const std::string& spec, double given_scale) {
  ERAID_ASSIGN_OR_RETURN(DriveProfile p, ParseDriveProfile(spec));
  if (given_scale >= 0) {
    if (!p.enabled()) return Status::InvalidArgument("--time-scale needs a --drive-model");
    if (!(given_scale >= 0.001 && given_scale <= 1e6))
      return Status::InvalidArgument("--time-scale must be 0.001..1000000");
    p.time_scale = given_scale;
  }
  return p;
}
constexpr const char* kDriveModelHelp =
    "the drives' timing model: none | nvme-tlc | csd | sata-ssd, with key=value overrides "
    "(csd,read_us=80,...; keys in docs/compressed-drive.md): each I/O completes when such a "
    "drive would finish it";
constexpr const char* kTimeScaleHelp =
    "slow the whole drive model by this factor (e.g. 20), so that the drives, not the CPU, "
    "bound the array";

// create's options as given, before they are checked.
struct CreateArgs {
  std::string dir, device_size = "256M", chunk = "64K", compression = "zstd:-3", flashalloc = "on";
  std::string placement = "sepbit", gc = "free-space", policy = "elastic", convert_rate = "64M";
  double beta = 0.9, hot_half_life_s = 10, io_timeout_s = 30, time_scale = -1,
         conversion_share = 0.10;
  std::string drive_model = "none";
  std::vector<std::string> device_paths;
  uint32_t devices = 4, rows = 16;
  double expansion = 2.0;
  bool force = false;
};

// The scheduler's options: InvalidArgument, saying which, if one is out of range.
Status CreateSchedulerOptions(const CreateArgs& c, SchedulerOptions* out) {
  ERAID_ASSIGN_OR_RETURN(out->policy, ParsePolicy(c.policy));
  if (!(c.beta >= 0.1 && c.beta <= 1.0)) return Status::InvalidArgument("--beta must be 0.1..1");
  auto rate = ParseSize(c.convert_rate);
  if (!rate.ok()) return Status::InvalidArgument("--convert-rate: " + rate.status().message());
  out->beta = c.beta;
  out->rate_bytes_per_sec = *rate;
  if (!(c.hot_half_life_s >= 2 && c.hot_half_life_s <= 3600))
    return Status::InvalidArgument("--hot-half-life must be 2..3600 seconds");
  out->hotness.half_life_ms = static_cast<uint64_t>(c.hot_half_life_s * 1000);
  if (!(c.conversion_share >= 0 && c.conversion_share <= 1))
    return Status::InvalidArgument("--conversion-share must be 0..1");
  out->conversion_share = c.conversion_share;
  return Status::Ok();
}

// Everything else create takes, checked in the order the options were before.
Status CreateOptions(const CreateArgs& c, ArrayDirOptions* o) {
  auto size = ParseSize(c.device_size);
  auto chunk_bytes = ParseSize(c.chunk);
  auto codec = ParseCodecConfig(c.compression);
  for (const Status& s : {size.status(), chunk_bytes.status(), codec.status()}) {
    ERAID_RETURN_IF_ERROR(s);
  }
  if (c.flashalloc != "on" && c.flashalloc != "off")
    return Status::InvalidArgument("--flashalloc must be on or off");
  if (c.gc != "free-space" && c.gc != "gp")
    return Status::InvalidArgument("--gc must be free-space or gp");
  ERAID_RETURN_IF_ERROR(CreateSchedulerOptions(c, &o->scheduler));
  if (*chunk_bytes == 0 || !IsBlockAligned(*chunk_bytes) ||
      (*chunk_bytes & (*chunk_bytes - 1)) != 0 || *chunk_bytes > (1u << 20)) {
    return Status::InvalidArgument("--chunk must be a power of two from 4K to 1M");
  }
  if (!(c.expansion >= 1.0 && c.expansion <= 16.0))
    return Status::InvalidArgument("--expansion must be 1..16");
  if (c.rows < 1 || c.rows > 4096)
    return Status::InvalidArgument("--rows-per-slot must be 1..4096");
  if (!(c.io_timeout_s >= 0.001 && c.io_timeout_s <= 86400))
    return Status::InvalidArgument("--io-timeout must be 0.001..86400 seconds");
  o->io_timeout_ms = static_cast<uint32_t>(std::llround(c.io_timeout_s * 1000));
  o->device_size_bytes = *size;
  o->drive.codec = *codec;
  o->drive.expansion = c.expansion;
  o->drive.flashalloc = c.flashalloc == "on";
  ERAID_ASSIGN_OR_RETURN(o->drive_model, DriveModelOption(c.drive_model, c.time_scale));
  o->array.chunk_blocks = static_cast<uint32_t>(BytesToBlocks(*chunk_bytes));
  o->array.rows_per_slot = c.rows;
  o->volume.placement = c.placement;
  o->volume.gc_when = c.gc == "gp" ? GcTrigger::kGarbageProportion : GcTrigger::kFreeSpace;
  return Status::Ok();
}

int Create(int argc, char** argv) {
  CreateArgs c;
  po::options_description desc("eraid create --dir DIR [options]\noptions");
  desc.add_options()("help,h", "this text")("dir", po::value(&c.dir)->required(),
                                            "directory for the manifest (and the drive files)")(
      "devices", po::value(&c.devices)->default_value(c.devices), "drives, n+1 (3..16)")(
      "device-size", po::value(&c.device_size)->default_value(c.device_size),
      "flash per emulated drive (e.g. 256M, 1G)")(
      "device", po::value(&c.device_paths)->composing(),
      "a drive's flash, once per drive (default DIR/driveK): a file, a block device, or an NBD "
      "export on another host (nbd://HOST:PORT/EXPORT, nbds://... with ?tls-psk-file=FILE, "
      "nbd+unix:///EXPORT?socket=PATH)")("io-timeout",
                                         po::value(&c.io_timeout_s)->default_value(c.io_timeout_s),
                                         "seconds a remote drive's request may take before the "
                                         "drive is failed (0.001..86400; `eraid set` changes it)")(
      "chunk", po::value(&c.chunk)->default_value(c.chunk), "RAID chunk (4K..1M, a power of two)")(
      "rows-per-slot", po::value(&c.rows)->default_value(c.rows), "rows per segment slot")(
      "expansion", po::value(&c.expansion)->default_value(c.expansion),
      "drive logical/physical size (1..16)")(
      "compression", po::value(&c.compression)->default_value(c.compression), "zstd:LEVEL or none")(
      "flashalloc", po::value(&c.flashalloc)->default_value(c.flashalloc), "on | off")(
      "drive-model", po::value(&c.drive_model)->default_value(c.drive_model), kDriveModelHelp)(
      "time-scale", po::value(&c.time_scale), kTimeScaleHelp)(
      "placement", po::value(&c.placement)->default_value(c.placement),
      "sepbit | nosep | sepgc | dac | fadac | warcip | hybrid")(
      "policy", po::value(&c.policy)->default_value(c.policy),
      "conversion policy: elastic | raid5 | raid10 | manual")(
      "beta", po::value(&c.beta)->default_value(c.beta),
      "physical use target, a fraction of the flash (0.1..1)")(
      "convert-rate", po::value(&c.convert_rate)->default_value(c.convert_rate),
      "background conversion limit, bytes/s (0 = none)")(
      "hot-half-life", po::value(&c.hot_half_life_s)->default_value(c.hot_half_life_s),
      "seconds in which a segment's access count halves (2..3600): the scheduler's memory of what "
      "is hot")("conversion-share",
                po::value(&c.conversion_share)->default_value(c.conversion_share),
                "under write churn, conversion traffic as a share of the bytes written "
                "(0..1; 0 = no limit)")(
      "gc", po::value(&c.gc)->default_value(c.gc),
      "when the log collects: free-space (when free segments run low) | gp (whenever "
      "garbage > 15%, as the SepBIT paper)")("force", po::bool_switch(&c.force),
                                             "overwrite an existing array");
  po::variables_map vm;
  if (int rc = Parse("create", desc, argc, argv, &vm); rc >= 0) return rc;
  ArrayDirOptions o;
  o.devices = c.devices;
  o.device_paths = c.device_paths;
  if (!c.device_paths.empty() && !vm["devices"].defaulted() && c.devices != c.device_paths.size()) {
    return Die("create",
               Status::InvalidArgument("--devices " + std::to_string(c.devices) + " but " +
                                       std::to_string(c.device_paths.size()) + " --device paths"),
               2);
  }
  if (!c.device_paths.empty()) o.devices = static_cast<uint32_t>(c.device_paths.size());
  if (Status s = CreateOptions(c, &o); !s.ok()) return Die("create", s, 2);
  if (ArrayInUse(c.dir))
    return Die("create", Status::Busy("the array in " + c.dir + " is in use (served?)"));
  auto a = ArrayDir::Create(c.dir, o, c.force);
  if (!a.ok())
    return Die("create", a.status(), a.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  if (Status s = (*a)->Close(); !s.ok()) return Die("create", s);
  std::cout << "created " << c.dir << ": " << o.devices << " drives, volume of "
            << BlocksToBytes((*a)->volume().capacity_blocks()) / 1048576 << " MiB\n";
  return 0;
}

// Settings kept in the manifest that may change after create (live, while served).
int Set(int argc, char** argv) {
  std::string dir, drive_model;
  double io_timeout_s = 0, time_scale = -1;
  po::options_description desc(
      "eraid set --dir DIR [--io-timeout SECONDS] [--drive-model SPEC [--time-scale X]]\n"
      "Changes a setting of an array. The I/O timeout: while it is served, at once (every\n"
      "remote drive's connection takes the new deadline, requests in flight included) and in\n"
      "its manifest; otherwise in the manifest. The drive model: on a stopped array only\n"
      "(the next serve uses it).\noptions");
  desc.add_options()("help,h", "this text")("dir", po::value(&dir)->required(),
                                            "the array directory")(
      "io-timeout", po::value(&io_timeout_s),
      "seconds a remote drive's request may take before the drive is failed (0.001..86400)")(
      "drive-model", po::value(&drive_model), kDriveModelHelp)("time-scale", po::value(&time_scale),
                                                               kTimeScaleHelp);
  po::variables_map vm;
  if (int rc = Parse("set", desc, argc, argv, &vm); rc >= 0) return rc;
  if (vm.count("drive-model") || vm.count("time-scale")) {
    if (vm.count("io-timeout"))
      return Die("set", Status::InvalidArgument("set the drive model and the timeout apart"), 2);
    if (!vm.count("drive-model"))
      return Die("set", Status::InvalidArgument("--time-scale needs a --drive-model"), 2);
    auto model = DriveModelOption(drive_model, time_scale);
    if (!model.ok()) return Die("set", model.status(), 2);
    if (ArrayInUse(dir)) {
      return Die("set", Status::Busy("the drive model changes on a stopped array: `eraid stop "
                                     "--dir " +
                                     dir + "` first"));
    }
    Status s = SetDriveModel(dir, *model);
    if (!s.ok()) return Die("set", s, s.code() == StatusCode::kInvalidArgument ? 2 : 1);
    std::cout << dir << ": drive model " << model->Spec() << "\n";
    return 0;
  }
  if (!vm.count("io-timeout"))
    return Die("set", Status::InvalidArgument("give --io-timeout or --drive-model"), 2);
  if (!(io_timeout_s >= 0.001 && io_timeout_s <= 86400)) {
    return Die("set", Status::InvalidArgument("--io-timeout must be 0.001..86400 seconds"), 2);
  }
  const auto ms = static_cast<uint32_t>(std::llround(io_timeout_s * 1000));
  auto reply = AdminCall(dir, {"set-io-timeout", std::to_string(ms)}, nullptr);
  if (reply.ok()) {  // served: the server changes it, live
    (reply->rc == 0 ? std::cout : std::cerr)
        << (reply->rc == 0 ? "" : "eraid set: ") << reply->text;
    return reply->rc;
  }
  if (reply.status().code() != StatusCode::kNotFound) return Die("set", reply.status());
  Status s = SetIoTimeout(dir, ms);
  if (!s.ok()) return Die("set", s, s.code() == StatusCode::kInvalidArgument ? 2 : 1);
  std::cout << dir << ": io timeout " << io_timeout_s << " s\n";
  return 0;
}

volatile sig_atomic_t g_child = 0;
void Forward(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

int Serve(int argc, char** argv) {
  ServeOptions o;
  bool daemon = false;
  std::string crc_cache = std::to_string(o.crc_cache_bytes >> 20) + "M";
  po::options_description desc(
      "eraid serve --dir DIR [--socket PATH | --tcp ADDR:PORT --tls-psk FILE] [--daemon]\n"
      "Serves the array's volume over NBD: nbdkit with the eraid plugin. Clients:\n"
      "  fio --ioengine=nbd --uri=nbd+unix:///?socket=DIR/nbd.sock, nbdcopy, qemu-img.\n"
      "options");
  desc.add_options()("help,h", "this text")("dir", po::value(&o.dir)->required(),
                                            "the array directory")(
      "socket", po::value(&o.socket), "Unix socket to listen on (default DIR/nbd.sock), mode 0600")(
      "tcp", po::value(&o.tcp), "listen on ADDR:PORT instead; only with TLS")(
      "tls-psk", po::value(&o.tls_psk), "TLS pre-shared keys file (psktool format), for --tcp")(
      "tls-certificates", po::value(&o.tls_certificates), "TLS certificates directory, for --tcp")(
      "threads", po::value(&o.threads)->default_value(o.threads),
      "nbdkit threads per connection (0: one per core; 16 if a drive is remote)")(
      "crc-cache", po::value(&crc_cache)->default_value(crc_cache),
      "RAM for sealed segments' block CRCs (read back from their summaries when not there; "
      "0: no bound), e.g. 32M, 1G")(
      "daemon", po::bool_switch(&daemon),
      "serve in the background (log in DIR/serve.log); stop with eraid stop")(
      "nbdkit", po::value(&o.nbdkit)->default_value(o.nbdkit), "the nbdkit binary")(
      "plugin", po::value(&o.plugin), "the eraid plugin (default: next to this binary)");
  po::variables_map vm;
  if (int rc = Parse("serve", desc, argc, argv, &vm); rc >= 0) return rc;
  {
    auto bytes = ParseSize(crc_cache);
    if (!bytes.ok()) return Die("serve", bytes.status().WithContext("--crc-cache"), 2);
    o.crc_cache_bytes = *bytes;
  }
  {
    ServeOptions check = o;
    auto cmd = NbdkitCommand(check);
    if (!cmd.ok())
      return Die("serve", cmd.status(),
                 cmd.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
    o = check;
  }
  if (daemon) {
    o.log = o.dir + "/serve.log";
    const pid_t pid = ::fork();
    if (pid < 0) return Die("serve", Status::IoError("fork failed"));
    if (pid > 0) {
      // Wait until it serves, or reports why not.
      for (int i = 0; i < 1200; ++i) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          return Die("serve", Status::IoError("the server did not start; see " + o.log));
        }
        if (AdminCall(o.dir, {"status", "--json"}, nullptr).ok() &&
            (o.socket.empty() || std::filesystem::exists(o.socket))) {
          std::cout << "serving " << o.dir << " on " << (o.tcp.empty() ? o.socket : o.tcp)
                    << " (pid " << pid << "); stop with: eraid stop --dir " << o.dir << "\n";
          return 0;
        }
        ::usleep(50000);
      }
      return Die("serve", Status::Aborted("the server did not start within 60 s; see " + o.log));
    }
    ::setsid();
    std::freopen("/dev/null", "r", stdin);
    std::freopen(o.log.c_str(), "a", stdout);
    std::freopen(o.log.c_str(), "a", stderr);
  }
  auto pid = StartServer(o);
  if (!pid.ok()) return Die("serve", pid.status());
  g_child = *pid;
  struct sigaction sa {};
  sa.sa_handler = Forward;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
  if (!daemon) {
    std::cout << "serving " << o.dir << " on " << (o.tcp.empty() ? o.socket : o.tcp)
              << " (Ctrl-C or eraid stop --dir " << o.dir << " to stop)" << std::endl;
  }
  int status = 0;
  while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!o.socket.empty()) ::unlink(o.socket.c_str());  // nbdkit leaves it behind
  if (WIFSIGNALED(status)) {
    std::cerr << "eraid serve: nbdkit killed by signal " << WTERMSIG(status) << "\n";
    return 1;
  }
  return WEXITSTATUS(status);
}

int Stop(int argc, char** argv) {
  std::string dir;
  po::options_description desc(
      "eraid stop --dir DIR\nStops the server of the array and waits until it is closed.\noptions");
  desc.add_options()("help,h", "this text")("dir", po::value(&dir)->required(),
                                            "the array directory");
  po::variables_map vm;
  if (int rc = Parse("stop", desc, argc, argv, &vm); rc >= 0) return rc;
  Status s = StopServer(dir);
  if (s.code() == StatusCode::kNotFound)
    return Die("stop", Status::NotFound("nothing serves " + dir));
  if (!s.ok()) return Die("stop", s);
  std::cout << "stopped " << dir << "\n";
  return 0;
}

// status, fail, replace, re-add, scrub, convert, inspect: the admin verbs (AdminVerbs(),
// shared with the admin socket), run by the server or, if none serves, here.
int AdminCommand(const AdminVerb& verb, int argc, char** argv) {
  const std::string name = verb.name;
  std::string dir;
  bool json = false;
  std::vector<std::string> values(verb.args.size());
  po::options_description desc(std::string(verb.synopsis) + "\noptions");
  desc.add_options()("help,h", "this text")("dir", po::value(&dir)->required(),
                                            "the array directory")("json", po::bool_switch(&json),
                                                                   "print JSON");
  for (size_t i = 0; i < verb.args.size(); ++i) {
    const AdminArg& arg = verb.args[i];
    auto* value = po::value(&values[i]);
    if (arg.fallback == nullptr) {
      value->required();
    } else if (*arg.fallback != '\0') {
      value->default_value(arg.fallback);
    }
    desc.add_options()(arg.name, value, arg.help);
  }
  double interval = 0;
  uint64_t count = 0;
  if (verb.watches) {
    desc.add_options()("interval", po::value(&interval),
                       "seconds per line of figures over that interval (0.1..3600)")(
        "count", po::value(&count),
        "with --interval: stop after this many lines (default: until interrupted)");
  }
  po::variables_map vm;
  if (int rc = Parse(name, desc, argc, argv, &vm); rc >= 0) return rc;
  if (vm.count("interval")) {
    if (!(interval >= 0.1 && interval <= 3600))
      return Die(name, Status::InvalidArgument("--interval must be 0.1..3600 seconds"), 2);
    return StatusInterval(dir, interval, count, json);
  }
  if (vm.count("count")) return Die(name, Status::InvalidArgument("--count needs --interval"), 2);
  std::vector<std::string> words{name};
  for (size_t i = 0; i < verb.args.size(); ++i) {
    if (auto bad = CheckAdminArg(verb.args[i], values[i]))
      return Die(name, Status::InvalidArgument(*bad), 2);
    words.push_back(values[i]);
  }
  return Admin(name, dir, words, json, verb.long_running);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(std::cerr, 2);
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return Usage(std::cout, 0);
  if (cmd == "create") return Create(argc - 1, argv + 1);
  if (cmd == "serve") return Serve(argc - 1, argv + 1);
  if (cmd == "stop") return Stop(argc - 1, argv + 1);
  if (cmd == "demo") return RunDemo(argc - 1, argv + 1);
  if (cmd == "volume") return VolumeCommand(argc - 1, argv + 1);
  if (cmd == "set") return Set(argc - 1, argv + 1);
  for (const AdminVerb& verb : AdminVerbs()) {
    if (verb.synopsis != nullptr && cmd == verb.name) return AdminCommand(verb, argc - 1, argv + 1);
  }
  std::cerr << "eraid: unknown subcommand '" << cmd << "'\n";
  return Usage(std::cerr, 2);
}
