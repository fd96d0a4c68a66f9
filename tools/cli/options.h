// Boost.Program_options as every eraid tool uses it: --help prints the description and
// exits 0; a bad option prints one line naming the tool and exits 2.
#pragma once

#include <boost/program_options.hpp>
#include <iostream>
#include <string>

namespace eraid {

// Returns -1 when the caller should go on, else the exit code.
inline int ParseOptions(const std::string& tool, boost::program_options::options_description& desc,
                        int argc, char** argv, boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  try {
    po::store(po::parse_command_line(argc, argv, desc), *vm);
    if (vm->count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(*vm);
  } catch (const po::error& e) {
    std::cerr << tool << ": " << e.what() << " (see " << tool << " --help)\n";
    return 2;
  }
  return -1;
}

}  // namespace eraid
