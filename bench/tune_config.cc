#include "bench/tune_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "bench/bench_util.h"

namespace strata::bench {
namespace {

StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return ErrnoError(errno, "cannot open {}", path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Writes `text` to `path` through a temporary file in the same folder: write, fsync, rename.
Status ReplaceAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create {}", tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return ErrnoError(err, "cannot write {}", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError(err, "cannot flush {}", tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError(err, "cannot rename {} to {}", tmp, path);
  }
  return Status();
}

}  // namespace

StatusOr<std::vector<std::string>> ApplyTuning(nlohmann::ordered_json* config, const TunedSettings& s) {
  if (!config->is_object()) return InvalidArgument("the config is not a JSON object");
  nlohmann::ordered_json& aio = (*config)["aio"];
  if (aio.is_null()) aio = nlohmann::ordered_json::object();
  if (!aio.is_object()) return InvalidArgument("\"aio\" is not an object");
  aio["block_size"] = s.block_size;
  aio["queue_depth"] = s.queue_depth;
  std::vector<std::string> keys = {"aio.block_size", "aio.queue_depth"};
  if (!s.param_buffer_count) return keys;
  auto zero = config->find("zero_optimization");
  if (zero == config->end() || !zero->is_object()) return keys;
  auto param = zero->find("offload_param");
  if (param == zero->end()) return keys;
  if (!param->is_object()) return InvalidArgument("\"zero_optimization.offload_param\" is not an object");
  (*param)["buffer_count"] = *s.param_buffer_count;
  keys.push_back("zero_optimization.offload_param.buffer_count");
  return keys;
}

StatusOr<std::vector<std::string>> WriteTunedConfig(const std::string& path, const TunedSettings& s) {
  STRATA_ASSIGN_OR_RETURN(std::string original, ReadWhole(path));
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(original);
  } catch (const std::exception& e) {
    return InvalidArgument("{} is not valid JSON: {}", path, e.what());
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> keys, ApplyTuning(&config, s));
  STRATA_RETURN_IF_ERROR(WriteFile(path + ".bak", original));
  STRATA_RETURN_IF_ERROR(ReplaceAtomically(path, config.dump(2) + "\n"));
  return keys;
}

}  // namespace strata::bench
