#include "tools/cli/fio_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace eraid {

namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(s);
  while (std::getline(in, field, sep)) out.push_back(field);
  return out;
}

// "50.000000%=177" -> 177 if the percentile matches.
bool Percentile(const std::string& field, const char* pct, double* out) {
  const std::string prefix = std::string(pct) + "%=";
  if (field.rfind(prefix, 0) != 0) return false;
  *out = std::atof(field.c_str() + prefix.size());
  return true;
}

}  // namespace

std::string NbdUnixUri(const std::string& socket) { return "nbd+unix:///?socket=" + socket; }

Result<FioResult> RunFio(const std::vector<std::string>& args, const std::string& fio) {
  int out[2];
  if (::pipe(out) != 0) return Status::IoError(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    ::close(out[1]);
    std::vector<std::string> all{fio};
    all.insert(all.end(), args.begin(), args.end());
    all.push_back("--output-format=terse");
    all.push_back("--terse-version=3");
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", fio.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string terse;
  std::string messages;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("3;", 0) == 0)
      terse = line;
    else if (!line.empty() && line.find("connected to NBD server") == std::string::npos)
      messages += line + "\n";
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || terse.empty()) {
    return Status::IoError("fio failed (exit " +
                           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                           "): " + (messages.empty() ? text : messages));
  }
  const auto f = Split(terse, ';');
  if (f.size() < 80) return Status::Corruption("fio printed a short terse line");
  FioResult r;
  r.error = std::atoi(f[4].c_str());
  r.read_iops = std::atof(f[7].c_str());
  r.write_iops = std::atof(f[48].c_str());
  r.read_mean_us = std::atof(f[15].c_str());
  r.write_mean_us = std::atof(f[56].c_str());
  for (size_t i = 17; i < 37; ++i) {
    Percentile(f[i], "50.000000", &r.read_p50_us);
    Percentile(f[i], "99.000000", &r.read_p99_us);
  }
  for (size_t i = 58; i < 78; ++i) {
    Percentile(f[i], "50.000000", &r.write_p50_us);
    Percentile(f[i], "99.000000", &r.write_p99_us);
  }
  return r;
}

}  // namespace eraid
