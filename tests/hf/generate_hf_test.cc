// `strata generate` against transformers' generate (needs the Python peers, as hf_test.cc;
// skipped with the reason otherwise): for a tiny random GPT-2, LLaMA (3.1 rope scaling),
// Qwen2 (q/k/v biases) and Qwen3 (q/k norms) written by transformers' save_pretrained, 20
// greedy tokens through the KV cache equal transformers' model.generate(do_sample=False)
// (both told to ignore the end-of-sequence id); then, with the folder's end-of-sequence id set
// to a token of that continuation, both stop right after it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_run.h"
#include "hf/hf_peers.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

const std::string kPrompt = "3 141 59 26 5 35";


// The ids after "generated:" on strata generate's output.
std::string GeneratedIds(const std::string& out) {
  const size_t at = out.find("generated: ");
  if (at == std::string::npos) return "";
  const size_t start = at + 11;
  return out.substr(start, out.find('\n', start) - start);
}

class GenerateVsTransformers : public testing::HfPeersTest {};

TEST_P(GenerateVsTransformers, GreedyTwentyTokensEqualTransformersGenerate) {
  testing::TempDir dir;
  const std::string hf = dir.path() + "/" + GetParam();
  std::string want;
  ASSERT_EQ(testing::RunHfModels("make " + GetParam() + " " + hf + " + generate " + hf + " 20 " + kPrompt, &want), 0)
      << want;
  want = want.substr(want.rfind('\n', want.size() - 2) + 1);  // the last line: the ids
  while (!want.empty() && want.back() == '\n') want.pop_back();
  testing::CliRun r = testing::RunStrata("generate --model " + hf + " --prompt-tokens \"" + kPrompt +
                                         "\" --max-new-tokens 20 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::printf("[ %s ] strata:       %s\n[ %s ] transformers: %s\n", GetParam().c_str(), GeneratedIds(r.out).c_str(),
              GetParam().c_str(), want.c_str());
  EXPECT_EQ(GeneratedIds(r.out), want);

  // With the folder's eos_token_id set to the fifth token of that continuation (config.json
  // and generation_config.json), both stop right after its first occurrence, eos included.
  std::istringstream words(want);
  std::vector<std::string> ids{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  ASSERT_EQ(ids.size(), 20u) << want;
  const std::string eos = ids[4];
  std::string through_eos;
  for (const std::string& id : ids) {
    through_eos += (through_eos.empty() ? "" : " ") + id;
    if (id == eos) break;
  }
  std::string want_eos;
  ASSERT_EQ(testing::RunHfModels("set-eos " + hf + " " + eos + " + generate " + hf + " 20 --stop-at-eos " + kPrompt,
                                 &want_eos),
            0)
      << want_eos;
  want_eos = want_eos.substr(want_eos.rfind('\n', want_eos.size() - 2) + 1);
  while (!want_eos.empty() && want_eos.back() == '\n') want_eos.pop_back();
  EXPECT_EQ(want_eos, through_eos) << "transformers, eos " << eos;
  r = testing::RunStrata("generate --model " + hf + " --prompt-tokens \"" + kPrompt + "\" --max-new-tokens 20");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(GeneratedIds(r.out), through_eos) << "eos " << eos << "\n" << r.out;
}

INSTANTIATE_TEST_SUITE_P(Models, GenerateVsTransformers, ::testing::Values("gpt2", "llama", "qwen2", "qwen3", "phi3", "phi4", "gemma2", "gemma3", "mixtral", "qwen3moe", "olmoe"));

// Without the peers: the errors name the bad flag or file.
TEST(GenerateCli, BadModelAndPromptAreNamed) {
  testing::TempDir dir;
  {  // an eos_token_id that is no token of the model
    std::ofstream(dir.path() + "/config.json") << R"({"model_type": "gpt2", "vocab_size": 256, "n_positions": 16,
      "n_embd": 8, "n_layer": 1, "n_head": 2, "eos_token_id": [1, 300]})";
    testing::CliRun r = testing::RunStrata("generate --model " + dir.path() + " --prompt hi");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.out.find("eos_token_id [1,300] is not a token id"), std::string::npos) << r.out;
    std::filesystem::remove(dir.path() + "/config.json");
  }
  testing::CliRun r = testing::RunStrata("generate --model " + dir.path() + "/nope --prompt hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--model"), std::string::npos) << r.out;
  r = testing::RunStrata("generate --model " + dir.path() + " --prompt hi --top-p 1.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--top-p"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace strata
