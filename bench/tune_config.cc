#include "bench/tune_config.h"

#include "bench/bench_util.h"
#include "src/checkpoint/durable_file.h"

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

StatusOr<std::vector<std::string>> WriteTunedConfig(const std::string& path, const TunedSettings& s) {
  STRATA_ASSIGN_OR_RETURN(std::string original, ckpt::ReadTextFile(path));
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(original);
  } catch (const std::exception& e) {
    return InvalidArgument("{} is not valid JSON: {}", path, e.what());
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> keys, ApplyTuning(&config, s));
  STRATA_RETURN_IF_ERROR(WriteFile(path + ".bak", original));
  STRATA_RETURN_IF_ERROR(ckpt::WriteFileAtomically(path, config.dump(2) + "\n"));
  return keys;
}

}  // namespace strata::bench
