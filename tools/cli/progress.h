// Progress of long commands on stderr: a redrawn bar on a terminal, or a line at every
// quarter when stderr is a file or pipe (logs stay readable).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace eraid {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2) != 0) {}
  ~ProgressBar() {
    if (drawn_ && tty_) std::fprintf(stderr, "\n");
  }
  void Update(double f) {
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    std::fflush(stdout);
    drawn_ = true;
    if (tty_) {
      const int width = 40, filled = static_cast<int>(width * f);
      std::fprintf(stderr, "\r%s [%s%s] %5.1f%%", label_.c_str(), std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), 100 * f);
    } else if (int quarter = static_cast<int>(f * 4); quarter > last_quarter_) {
      last_quarter_ = quarter;
      std::fprintf(stderr, "%s %d%%\n", label_.c_str(), quarter * 25);
    }
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
  bool drawn_ = false;
  int last_quarter_ = 0;
};

}  // namespace eraid
