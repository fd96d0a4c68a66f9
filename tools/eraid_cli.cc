// eraid: the administration command. Subcommands available so far: create.
#include <boost/program_options.hpp>
#include <iostream>

#include "tools/array_dir.h"

namespace po = boost::program_options;
using namespace eraid;  // NOLINT: a tool

namespace {

int Usage(std::ostream& out, int rc) {
  out << "usage: eraid SUBCOMMAND [options]   (eraid SUBCOMMAND --help for its options)\n"
         "subcommands:\n"
         "  create   make an array of emulated compressing drives in a directory\n";
  return rc;
}

int Create(int argc, char** argv) {
  std::string dir, device_size = "256M", chunk = "64K", compression = "zstd:-3", flashalloc = "on";
  std::string placement = "sepbit";
  uint32_t devices = 4, rows = 16;
  double expansion = 2.0;
  bool force = false;
  po::options_description desc("eraid create --dir DIR [options]\noptions");
  desc.add_options()("help,h", "this text")
      ("dir", po::value(&dir)->required(), "directory for the drive files and manifest")
      ("devices", po::value(&devices)->default_value(devices), "emulated drives, n+1 (3..16)")
      ("device-size", po::value(&device_size)->default_value(device_size), "flash per drive (e.g. 256M, 1G)")
      ("chunk", po::value(&chunk)->default_value(chunk), "RAID chunk (4K..1M, a power of two)")
      ("rows-per-slot", po::value(&rows)->default_value(rows), "rows per segment slot")
      ("expansion", po::value(&expansion)->default_value(expansion), "drive logical/physical size (1..16)")
      ("compression", po::value(&compression)->default_value(compression), "zstd:LEVEL or none")
      ("flashalloc", po::value(&flashalloc)->default_value(flashalloc), "on | off")
      ("placement", po::value(&placement)->default_value(placement), "sepbit | nosep | sepgc | dac | fadac | warcip")
      ("force", po::bool_switch(&force), "overwrite an existing array");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "eraid create: " << e.what() << "\n";
    return 2;
  }
  ArrayDirOptions o;
  o.devices = devices;
  auto size = ParseSize(device_size);
  auto chunk_bytes = ParseSize(chunk);
  auto codec = ParseCodecConfig(compression);
  for (const Status& s : {size.status(), chunk_bytes.status(), codec.status()}) {
    if (!s.ok()) {
      std::cerr << "eraid create: " << s.message() << "\n";
      return 2;
    }
  }
  if (flashalloc != "on" && flashalloc != "off") {
    std::cerr << "eraid create: --flashalloc must be on or off\n";
    return 2;
  }
  if (!IsBlockAligned(*chunk_bytes) || *chunk_bytes == 0) {
    std::cerr << "eraid create: --chunk must be a multiple of 4K\n";
    return 2;
  }
  o.device_size_bytes = *size;
  o.drive.codec = *codec;
  o.drive.expansion = expansion;
  o.drive.flashalloc = flashalloc == "on";
  o.array.chunk_blocks = static_cast<uint32_t>(BytesToBlocks(*chunk_bytes));
  o.array.rows_per_slot = rows;
  o.volume.placement = placement;
  auto a = ArrayDir::Create(dir, o, force);
  if (!a.ok()) {
    std::cerr << "eraid create: " << a.status().message() << "\n";
    return 1;
  }
  if (Status s = (*a)->Close(); !s.ok()) {
    std::cerr << "eraid create: " << s.ToString() << "\n";
    return 1;
  }
  std::cout << "created " << dir << ": " << devices << " drives, volume of "
            << BlocksToBytes((*a)->volume().capacity_blocks()) / 1048576 << " MiB\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(std::cerr, 2);
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return Usage(std::cout, 0);
  if (cmd == "create") return Create(argc - 1, argv + 1);
  std::cerr << "eraid: unknown subcommand '" << cmd << "'\n";
  return Usage(std::cerr, 2);
}
