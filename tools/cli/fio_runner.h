// Running fio as a child process and reading its results (terse format, version 3): for
// `eraid demo`, the e2e tests' helpers and the benchmarks. fio is the client; it talks
// NBD to nbdkit through its nbd engine (libnbd).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace eraid {

struct FioResult {
  int error = 0;  // fio's error field (0 = no error)
  double read_iops = 0, write_iops = 0;
  double read_p50_us = 0, read_p99_us = 0, write_p50_us = 0, write_p99_us = 0;
  double read_mean_us = 0, write_mean_us = 0;
};

// Runs `fio ARGS --output-format=terse --terse-version=3` (one job). Fails with fio's own
// messages if it exits non-zero (a verification failure does that) or prints no result.
Result<FioResult> RunFio(const std::vector<std::string>& args, const std::string& fio = "fio");

// The fio URI of an NBD server on a Unix socket.
std::string NbdUnixUri(const std::string& socket);

}  // namespace eraid
