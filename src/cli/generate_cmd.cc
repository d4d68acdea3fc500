// `strata generate --model DIR_OR_CKPT --prompt TEXT`: continues a prompt with a trained
// model, to look at a fine-tune without leaving Strata. The model is a Hugging Face folder
// (config.json + safetensors) or a Strata checkpoint, whose rank files are read block by block
// as `strata export` reads them (a LoRA checkpoint with its adapters merged; nothing is copied
// to disk). The whole model is loaded into host memory and run on the CPU: this is for small
// models.
//
// Tokens: byte-level for vocab-256 models (the built-in tokenizer: text in, text out);
// other models take --prompt-tokens "ID ID ..." and print token ids (tokenize with the
// folder's tokenizer elsewhere; Strata has no BPE tokenizer of its own). Generation stops
// after an end-of-sequence token: the folder's eos_token_id (generation_config.json, else
// config.json; for a Strata checkpoint, of the folder it was fine-tuned from), or
// --stop-token; --ignore-eos turns the folder's off.
#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include "src/base/input_file.h"
#include "src/hf/export_target.h"
#include "src/hf/hf_loader.h"
#include "src/cli/commands.h"
#include "src/config/json_reader.h"
#include "src/model/generate.h"
#include "src/model/hf_config.h"

namespace strata::cli {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kByteVocab = 256;

struct Args {
  std::string model, prompt, prompt_tokens, dtype = "fp32";
  int64_t max_new_tokens = 100;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  std::vector<int64_t> stop_tokens;
  bool ignore_eos = false;
};

// A model to run: a Hugging Face folder's, or a Strata checkpoint's (read from its rank
// files directly, as export reads them: nothing is copied to disk).
struct LoadedModel {
  model::ModelConfig config;
  std::string eos_folder;  // where eos_token_id is looked up ("" = nowhere)
  std::function<Status(model::FullModel&)> load;
};

StatusOr<LoadedModel> OpenModel(const std::string& model) {
  std::error_code ec;
  if (fs::exists(fs::path(model) / "config.json", ec)) {
    STRATA_ASSIGN_OR_RETURN(model::ModelConfig config, model::ReadHfModelConfig(model));
    return LoadedModel{config, model, [model, config](model::FullModel& net) -> Status {
                         STRATA_ASSIGN_OR_RETURN(std::shared_ptr<ckpt::HfWeights> w, ckpt::HfWeights::Open(model, config));
                         return ckpt::LoadIntoModel(*w, net);
                       }};
  }
  if (!fs::is_directory(model, ec))
    return InvalidArgument("--model '{}': not a folder (a Hugging Face model folder or a checkpoint)", model);
  StatusOr<ckpt::Consolidator> c = ckpt::Consolidator::Open(model);
  if (!c.ok())
    return InvalidArgument("--model '{}': neither a model folder (no config.json) nor a readable checkpoint: {}", model,
                           c.status().ToString());
  // The end-of-sequence ids of the folder the run was fine-tuned from, as its export would copy them.
  std::vector<std::string> notes;
  STRATA_ASSIGN_OR_RETURN(std::string source, ckpt::SourceFolder(c->manifest(), "", "", &notes));
  auto shared = std::make_shared<ckpt::Consolidator>(std::move(c).value());
  return LoadedModel{ckpt::ModelOf(*shared), source,
                     [shared](model::FullModel& net) { return ckpt::LoadCheckpointIntoModel(*shared, net); }};
}

// The folder's end-of-sequence ids: eos_token_id (an id or a list) of generation_config.json,
// else of config.json; none when neither says. A file that says it wrongly is an error.
StatusOr<std::vector<int64_t>> EosTokens(const std::string& folder, int64_t vocab) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = (fs::path(folder) / name).string();
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    STRATA_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, kMaxConfigFileBytes, "a model folder's JSON file"));
    STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonText(text, "'" + path + "'"));
    if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
    const nlohmann::json& e = j["eos_token_id"];
    std::vector<int64_t> ids;
    for (const nlohmann::json& id : e.is_array() ? e : nlohmann::json::array({e})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
        return InvalidArgument("'{}': eos_token_id {} is not a token id in [0, {})", path, e.dump(), vocab);
      ids.push_back(id.get<int64_t>());
    }
    return ids;
  }
  return std::vector<int64_t>();
}

StatusOr<std::vector<int64_t>> PromptTokens(const Args& a, int64_t vocab) {
  std::vector<int64_t> tokens;
  if (!a.prompt_tokens.empty()) {
    std::istringstream in(a.prompt_tokens);
    std::string word;
    while (in >> word) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(word, &used);
      } catch (...) {
      }
      if (used != word.size() || id < 0 || id >= vocab)
        return InvalidArgument("--prompt-tokens: '{}' is not a token id in [0, {})", word, vocab);
      tokens.push_back(id);
    }
  } else {
    if (vocab != kByteVocab)
      return InvalidArgument("--prompt: text needs the byte tokenizer (vocab 256) and this model's vocab is {}; give "
                             "--prompt-tokens \"ID ID ...\" from its own tokenizer",
                             vocab);
    for (unsigned char c : a.prompt) tokens.push_back(c);
  }
  if (tokens.empty()) return InvalidArgument("give a non-empty --prompt or --prompt-tokens");
  return tokens;
}

int Run(const Args& a) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  };
  if (!(std::isfinite(a.temperature) && a.temperature >= 0))
    return fail(InvalidArgument("--temperature {}: must be a finite number >= 0 (0 = greedy)", a.temperature));
  if (!(a.top_p > 0 && a.top_p <= 1)) return fail(InvalidArgument("--top-p {}: must be in (0, 1]", a.top_p));
  StatusOr<LoadedModel> loaded = OpenModel(a.model);
  if (!loaded.ok()) return fail(loaded.status());
  const model::ModelConfig* config = &loaded->config;
  StatusOr<std::vector<int64_t>> prompt = PromptTokens(a, config->vocab_size);
  if (!prompt.ok()) return fail(prompt.status());
  std::vector<int64_t> stop = a.stop_tokens;
  for (int64_t t : stop)
    if (t < 0 || t >= config->vocab_size)
      return fail(InvalidArgument("--stop-token {}: not a token id in [0, {})", t, config->vocab_size));
  if (!a.ignore_eos && !loaded->eos_folder.empty()) {
    StatusOr<std::vector<int64_t>> eos = EosTokens(loaded->eos_folder, config->vocab_size);
    if (!eos.ok()) return fail(eos.status());
    stop.insert(stop.end(), eos->begin(), eos->end());
  }
  const int64_t max_positions = model::MaxPositions(*config);
  if (static_cast<int64_t>(prompt->size()) > max_positions)
    return fail(InvalidArgument("the prompt has {} tokens, more than the model's {} positions", prompt->size(),
                                max_positions));

  model::FullModel net{model::ModelSpec(*config)};
  if (Status s = loaded->load(net); !s.ok()) return fail(s);
  if (a.dtype == "bf16") net.to(torch::kBFloat16);
  net.eval();

  const bool bytes = a.prompt_tokens.empty();
  auto print = [&](int64_t token) {
    if (bytes) std::fputc(static_cast<int>(token), stdout);
    else std::printf(" %lld", static_cast<long long>(token));
    std::fflush(stdout);
  };
  if (bytes) std::fputs(a.prompt.c_str(), stdout);
  else std::printf("prompt:%s\ngenerated:", [&] {
    std::string s;
    for (int64_t t : *prompt) {  // (appended in two steps: GCC 12 warns falsely about " " + string)
      s += ' ';
      s += std::to_string(t);
    }
    return s;
  }().c_str());
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(a.seed);
  model::GenerateResult r =
      model::Generate(net, max_positions, *prompt, a.max_new_tokens, {a.temperature, a.top_p}, gen, print, stop);
  std::printf("\n");
  std::fflush(stdout);  // the notes below go to stderr: after the ids' line, also through a pipe
  if (r.nonfinite_logits)
    return fail(Error(StatusCode::kDataLoss, "the model's logits hold NaN or Inf after {} new tokens: its weights are "
                      "not finite (a diverged run?)", r.tokens.size()));
  if (r.reached_stop_token)
    std::fprintf(stderr, "note: stopped after %zu new tokens at the end-of-sequence token %lld (--ignore-eos goes on)\n",
                 r.tokens.size(), static_cast<long long>(r.tokens.back()));
  if (r.reached_max_positions)
    std::fprintf(stderr, "note: stopped after %zu new tokens at the model's %lld positions (seq_len)\n",
                 r.tokens.size(), static_cast<long long>(max_positions));
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, Action* action) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "generate",
      "continue a prompt with a trained model (greedy or temperature/top-p sampling, KV cache) to check a small "
      "fine-tune; runs on the CPU with the whole model in host memory; stops at --max-new-tokens, the model's seq_len "
      "or an end-of-sequence token");
  cmd->add_option("--model", a->model, "a Hugging Face model folder (config.json + safetensors) or a Strata checkpoint "
                                       "(a --save folder or one step folder)")->required();
  auto* text = cmd->add_option("--prompt", a->prompt, "prompt text, byte-tokenized (vocab-256 models such as the "
                                                      "default job's); the continuation is printed as text");
  auto* ids = cmd->add_option("--prompt-tokens", a->prompt_tokens, "prompt as token ids \"ID ID ...\" (any vocab); "
                                                                   "the continuation is printed as ids");
  text->excludes(ids);
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "tokens to generate (default 100)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", a->temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)");
  cmd->add_option("--top-p", a->top_p, "sample only from the most likely tokens whose probability reaches P "
                                       "(default 1: all)");
  cmd->add_option("--seed", a->seed, "sampling seed (default 0)");
  cmd->add_option("--stop-token", a->stop_tokens, "stop after this token id too (repeatable)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "do not stop at the model's eos_token_id (generation_config.json or "
                                               "config.json)");
  cmd->add_option("--dtype", a->dtype, "fp32 (default) or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->callback([=] {
    *action = [=] { return Run(*a); };
  });
}

}  // namespace strata::cli
