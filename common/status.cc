#include "common/status.h"

namespace eraid {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kNoSpace:
      return "NoSpace";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kNotSupported:
      return "NotSupported";
    case StatusCode::kBusy:
      return "Busy";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kAborted:
      return "Aborted";
  }
  return "Unknown";
}

const std::string& Status::message() const {
  static const std::string kNone;
  return rep_ ? rep_->message : kNone;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(rep_->code));
  if (!rep_->message.empty()) {
    out += ": ";
    out += rep_->message;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  if (!rep_->message.empty()) {
    msg += ": ";
    msg += rep_->message;
  }
  return Status(rep_->code, std::move(msg));
}

}  // namespace eraid
