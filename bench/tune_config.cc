#include "bench/tune_config.h"

#include <filesystem>

#include "bench/bench_util.h"
#include "src/base/input_file.h"
#include "src/base/json_text.h"
#include "src/base/durable_file.h"

namespace strata::bench {

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

StatusOr<TunedWrite> WriteTunedConfig(const std::string& path, const TunedSettings& s) {
  STRATA_ASSIGN_OR_RETURN(std::string original, ReadInputFile(path, kMaxConfigFileBytes, "a config file"));
  STRATA_ASSIGN_OR_RETURN(nlohmann::ordered_json config, ParseOrderedJsonText(original, "'" + path + "'"));
  TunedWrite w;
  STRATA_ASSIGN_OR_RETURN(w.keys, ApplyTuning(&config, s));
  const std::string bak = path + ".bak";
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(bak, ec))) {
    STRATA_RETURN_IF_ERROR(WriteFileAtomically(bak, original, /*mode_of=*/path));
    w.backup_written = true;
  }
  STRATA_RETURN_IF_ERROR(WriteFileAtomically(path, config.dump(2) + "\n"));
  return w;
}

}  // namespace strata::bench
