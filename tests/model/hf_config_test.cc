// config.json -> ModelConfig (hf_config.h) without transformers: each family's keys, both
// rope spellings, and errors that name what is wrong; ModelConfig -> config.json -> the
// same ModelConfig; and the block parameter arithmetic of the new variants (what the
// estimator and the shard plan use) equal to the blocks actually built.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "src/model/hf_config.h"
#include "src/model/model.h"
#include "src/model/model_family.h"
#include "support/temp_dir.h"

namespace strata::model {
namespace {

nlohmann::json Llama() {
  return nlohmann::json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
      "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": false})");
}

std::string ErrorOf(const nlohmann::json& j) {
  auto c = ModelConfigFromHf(j, "'x/config.json'");
  return c.ok() ? "" : c.status().ToString();
}

#define EXPECT_ERROR_HAS(json, text)                                            \
  do {                                                                          \
    const std::string err_ = ErrorOf(json);                                     \
    EXPECT_NE(err_.find(text), std::string::npos) << "error: '" << err_ << "'"; \
  } while (0)

TEST(HfConfig, ReadsEachFamily) {
  auto llama = ModelConfigFromHf(Llama(), "x");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_EQ(llama->arch, Arch::kLlama);
  EXPECT_EQ(llama->n_kv_head, 2);
  EXPECT_EQ(llama->ffn_hidden, 192);
  EXPECT_EQ(llama->max_positions, 4096);
  EXPECT_EQ(llama->seq_len, kDefaultHfSeqLen);  // min(max_position_embeddings, 2048)
  EXPECT_FALSE(llama->tie_embeddings);
  EXPECT_EQ(llama->rope_theta, 10000.0);

  nlohmann::json q2 = Llama();
  q2["model_type"] = "qwen2";
  q2["architectures"] = {"Qwen2ForCausalLM"};
  q2["tie_word_embeddings"] = true;
  q2["use_sliding_window"] = false;
  q2["sliding_window"] = 16;  // not used: use_sliding_window is false
  auto qwen2 = ModelConfigFromHf(q2, "x");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status().ToString();
  EXPECT_TRUE(qwen2->qkv_bias && qwen2->tie_embeddings && !qwen2->qk_norm);
  EXPECT_EQ(qwen2->sliding_window, 0);
  EXPECT_EQ(qwen2->hf_model_type, "qwen2");

  nlohmann::json q3 = Llama();
  q3["model_type"] = "qwen3";
  q3["architectures"] = {"Qwen3ForCausalLM"};
  q3["head_dim"] = 32;
  auto qwen3 = ModelConfigFromHf(q3, "x");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status().ToString();
  EXPECT_TRUE(qwen3->qk_norm && !qwen3->qkv_bias);
  EXPECT_EQ(HeadDim(*qwen3), 32);

  nlohmann::json gpt2 = {{"model_type", "gpt2"}, {"vocab_size", 256}, {"n_embd", 64}, {"n_layer", 2},
                         {"n_head", 4},          {"n_positions", 64}, {"n_inner", nullptr}};
  auto g = ModelConfigFromHf(gpt2, "x");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->arch, Arch::kGpt2);
  EXPECT_TRUE(g->tie_embeddings);
  EXPECT_EQ(FfnHidden(*g), 256);
  EXPECT_EQ(g->seq_len, 64);
}

TEST(HfConfig, ReadsBothRopeSpellings) {
  nlohmann::json v4 = Llama();  // transformers 4: rope_theta + rope_scaling with "rope_type" (or "type")
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  nlohmann::json v5 = Llama();  // transformers 5: rope_parameters
  v5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  for (const auto& j : {v4, v5}) {
    auto c = ModelConfigFromHf(j, "x");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->rope_theta, 500000.0);
    EXPECT_EQ(c->rope_scaling, RopeScaling::Llama3(8.0, 1.0, 4.0, 8192));
  }
}

TEST(HfConfig, ErrorsNameTheKey) {
  nlohmann::json gemma = {{"architectures", {"GemmaForCausalLM"}}, {"model_type", "gemma"}};
  EXPECT_ERROR_HAS(gemma, "model_type \"gemma\" / architectures [\"GemmaForCausalLM\"] is not supported; Strata reads "
                          "gpt2 (GPT2LMHeadModel), llama (LlamaForCausalLM), mistral (MistralForCausalLM), qwen2 "
                          "(Qwen2ForCausalLM), qwen3 (Qwen3ForCausalLM)");
  EXPECT_ERROR_HAS(nlohmann::json::object(), "neither \"model_type\" nor \"architectures\"");
  nlohmann::json head = Llama();
  head["architectures"] = {"LlamaForSequenceClassification"};
  EXPECT_ERROR_HAS(head, "architectures [\"LlamaForSequenceClassification\"] is not supported for model_type \"llama\"");

  nlohmann::json missing = Llama();
  missing.erase("hidden_size");
  EXPECT_ERROR_HAS(missing, "'x/config.json': the key \"hidden_size\" is missing");
  nlohmann::json wrong_type = Llama();
  wrong_type["num_hidden_layers"] = "2";
  EXPECT_ERROR_HAS(wrong_type, "\"num_hidden_layers\" must be an integer, got \"2\"");

  nlohmann::json yarn = Llama();
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_ERROR_HAS(yarn, "\"rope_scaling\": rope_type \"yarn\" is not supported");
  nlohmann::json partial = Llama();
  partial["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
  EXPECT_ERROR_HAS(partial, "\"rope_scaling\": the key \"low_freq_factor\" is missing");
  nlohmann::json inverted = Llama();
  inverted["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                                 {"high_freq_factor", 1.0}, {"original_max_position_embeddings", 8192}};
  EXPECT_ERROR_HAS(inverted, "\"rope_parameters\": llama3 scaling needs factor >= 1 and 0 < low_freq_factor < "
                             "high_freq_factor");

  nlohmann::json bias = Llama();
  bias["attention_bias"] = true;
  EXPECT_ERROR_HAS(bias, "\"attention_bias\": true is not supported");
  nlohmann::json act = Llama();
  act["hidden_act"] = "gelu";
  EXPECT_ERROR_HAS(act, "\"hidden_act\": \"gelu\" is not supported");
}

// Mistral's window: the default seq_len stays inside it; a longer one is refused by name.
// The bounds strata.model.* has apply to config.json too: a size beyond 2^31 (or any size
// beyond ModelLimits) is refused naming the key, not carried into the arithmetic.
TEST(HfConfig, SizesBeyondTheLimitsAreRefusedAsInStrataModel) {
  for (const auto& [key, field] : std::vector<std::pair<std::string, std::string>>{
           {"vocab_size", "vocab_size"}, {"hidden_size", "d_model"}, {"intermediate_size", "ffn_hidden"},
           {"num_hidden_layers", "n_layer"}, {"max_position_embeddings", "max_positions"}}) {
    nlohmann::json j = Llama();
    j[key] = int64_t{3} << 31;
    EXPECT_ERROR_HAS(j, "'x/config.json': \"" + key + "\" = 6442450944 is outside [");
    (void)field;
  }
  nlohmann::json heads = Llama();
  heads["num_attention_heads"] = 8192;
  EXPECT_ERROR_HAS(heads, "\"num_attention_heads\" = 8192 is outside [1, 4096], the range Strata accepts");
}

// Every number config.json holds gets the range the same setting has in strata.model (and
// --set): a router loss coefficient of -1 or 1e300 used to train, a negative sliding window to
// advise "set seq_len <= -1". The error names config.json's key; Validate refuses the same
// values whatever their source.
TEST(HfConfig, EveryValueGetsTheRangeItHasInStrataModel) {
  nlohmann::json moe = Llama();
  moe["model_type"] = "qwen3_moe";
  moe["architectures"] = {"Qwen3MoeForCausalLM"};
  moe["moe_intermediate_size"] = 32;
  moe["num_experts"] = 4;
  moe["num_experts_per_tok"] = 2;
  moe["output_router_logits"] = true;
  ASSERT_EQ(ErrorOf(moe), "");
  struct Case {
    std::string key;
    nlohmann::json value;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"router_aux_loss_coef", -1, "\"router_aux_loss_coef\" = -1 is outside [0, 1000]"},
           {"router_aux_loss_coef", 1e300, "\"router_aux_loss_coef\" = 1e+300 is outside [0, 1000]"},
           {"num_experts_per_tok", 0, "\"num_experts_per_tok\" = 0 is outside [1, 4096]"},
           {"rms_norm_eps", 1e300, "\"rms_norm_eps\" = 1e+300 is outside [0, 1]"},
           {"rope_theta", 0.5, "\"rope_theta\" = 0.5 is outside [1, 1000000000]"},
           {"num_key_value_heads", -2, "\"num_key_value_heads\" = -2 is outside [0, 4096]"},
           {"partial_rotary_factor", 2, "\"partial_rotary_factor\" = 2 is outside [0, 1]"}}) {
    nlohmann::json j = moe;
    j[c.key] = c.value;
    EXPECT_ERROR_HAS(j, "'x/config.json': " + c.says);
  }
  nlohmann::json mistral = Llama();
  mistral["model_type"] = "mistral";
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["sliding_window"] = -1;
  EXPECT_ERROR_HAS(mistral, "\"sliding_window\" = -1 is outside [0, 16777216], the range Strata accepts");
  EXPECT_EQ(ErrorOf(mistral).find("seq_len <= -1"), std::string::npos);
  // The same values however they arrive (strata.model, --set, a manifest, code): Validate.
  auto c = ModelConfigFromHf(moe, "x");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  c->moe.aux_loss_coef = -1;
  EXPECT_NE(Validate(*c).ToString().find("moe.aux_loss_coef = -1 is outside [0, 1000]"), std::string::npos);
  c->moe.aux_loss_coef = 0.001;
  c->sliding_window = -1;
  EXPECT_NE(Validate(*c).ToString().find("sliding_window = -1 is outside [0, 16777216], the range Strata accepts "
                                         "(0 = none)"), std::string::npos) << Validate(*c).ToString();
}

// A config.json nobody vouches for: a FIFO is refused at once (a plain open would wait for a
// writer), deep nesting is an error naming the byte (a recursive copy or dump of it would
// overflow the stack later, in export or generate).
TEST(HfConfig, FolderFilesThatCannotBeReadSafelyAreRefused) {
  strata::testing::TempDir dir;
  const std::string folder = dir.path() + "/model";
  std::filesystem::create_directories(folder);
  ASSERT_EQ(::mkfifo((folder + "/config.json").c_str(), 0600), 0);
  auto fifo = ReadHfModelConfig(folder);
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("is a FIFO (named pipe), not a regular file"), std::string::npos)
      << fifo.status().ToString();
  std::filesystem::remove(folder + "/config.json");
  nlohmann::json j = Llama();
  std::string text = j.dump();
  text.insert(1, "\"notes\": " + std::string(100000, '[') + std::string(100000, ']') + ", ");
  std::ofstream(folder + "/config.json") << text;
  auto deep = ReadHfModelConfig(folder);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("config.json': nested deeper than 64 levels"), std::string::npos)
      << deep.status().ToString();
}

TEST(HfConfig, SlidingWindowBoundsTheSequence) {
  nlohmann::json m = Llama();
  m["model_type"] = "mistral";
  m["architectures"] = {"MistralForCausalLM"};
  m["sliding_window"] = 1024;
  auto c = ModelConfigFromHf(m, "x");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->sliding_window, 1024);
  EXPECT_EQ(c->seq_len, 1024);
  c->seq_len = 1025;
  const Status s = Validate(*c);
  EXPECT_NE(s.ToString().find("seq_len = 1025 exceeds sliding_window = 1024"), std::string::npos) << s.ToString();
  m["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  auto none = ModelConfigFromHf(m, "x");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->sliding_window, 0);
}

// What export writes reads back as the same model, for every family.
TEST(HfConfig, WrittenConfigReadsBackTheSame) {
  std::vector<ModelConfig> configs;
  ModelConfig gpt2;
  gpt2.max_positions = 256;
  configs.push_back(gpt2);
  ModelConfig llama;
  llama.arch = Arch::kLlama;
  llama.n_kv_head = 2;
  llama.tie_embeddings = false;
  llama.rope_theta = 500000;
  llama.rope_scaling = RopeScaling::Llama3(8.0, 1.0, 4.0, 64);
  configs.push_back(llama);
  ModelConfig mistral = llama;
  mistral.rope_scaling = {};
  mistral.hf_model_type = "mistral";
  mistral.sliding_window = 128;
  configs.push_back(mistral);
  ModelConfig qwen2 = mistral;
  qwen2.hf_model_type = "qwen2";
  qwen2.qkv_bias = true;
  configs.push_back(qwen2);
  ModelConfig qwen3 = llama;
  qwen3.rope_scaling = {};
  qwen3.hf_model_type = "qwen3";
  qwen3.qk_norm = true;
  qwen3.head_dim = 64;
  configs.push_back(qwen3);
  ModelConfig gemma2 = llama;
  gemma2.rope_scaling = {};
  gemma2.hf_model_type = "gemma2";
  gemma2.tie_embeddings = true;
  gemma2.head_dim = 32;
  gemma2.sliding_window = 128;
  gemma2.gemma = {24, 50, 30, 0, {true, false}};
  configs.push_back(gemma2);
  ModelConfig gemma3 = gemma2;
  gemma3.hf_model_type = "gemma3_text";
  gemma3.qk_norm = true;
  gemma3.rope_theta = 1e6;
  gemma3.gemma = {32, 0, 0, 10000, {true, false}};
  configs.push_back(gemma3);
  for (ModelConfig c : configs) {
    c.ffn_hidden = FfnHidden(c);  // written out explicitly
    c.max_positions = MaxPositions(c);
    ASSERT_TRUE(Validate(c).ok()) << Validate(c).ToString();
    const nlohmann::ordered_json j = HfConfigJson(c, "float32");
    auto back = ModelConfigFromHf(nlohmann::json::parse(j.dump()), "x");
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << j.dump(1);
    back->seq_len = c.seq_len;
    back->norm_eps = c.norm_eps;  // GPT-2's layer_norm_epsilon vs LLaMA's rms_norm_eps: both written
    EXPECT_EQ(nlohmann::json(HfConfigJson(*back, "float32")).dump(), nlohmann::json(j).dump()) << HfModelType(c);
    EXPECT_EQ(back->qkv_bias, c.qkv_bias);
    EXPECT_EQ(back->qk_norm, c.qk_norm);
    EXPECT_EQ(back->hf_model_type, c.hf_model_type);
    EXPECT_EQ(back->sliding_window, c.sliding_window);
    EXPECT_TRUE(back->gemma == c.gemma) << HfModelType(c);
  }
}

// A tiny model of family `f`, with what its blocks always have (model_family.h).
ModelConfig TinyOf(const ModelFamily& f) {
  ModelConfig c;
  c.arch = f.gpt2() ? Arch::kGpt2 : Arch::kLlama;
  c.hf_model_type = f.gpt2() || f.model_type == "llama" ? "" : std::string(f.model_type);
  c.vocab_size = 256;
  c.seq_len = 32;
  c.max_positions = 128;
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.tie_embeddings = f.ties_embeddings;
  c.qkv_bias = f.qkv_bias == Has::kAlways;
  c.qk_norm = f.qk_norm == Has::kAlways;
  if (!f.gpt2()) c.n_kv_head = 2;
  if (f.sliding == Sliding::kAll) c.sliding_window = 64;
  if (f.gemma()) {
    c.head_dim = 32;
    c.sliding_window = 64;
    c.gemma = f.model_type == "gemma2" ? GemmaOptions{24, 50, 30, 0, {true, false}}
                                       : GemmaOptions{32, 0, 0, 10000, {true, false}};
  }
  if (f.experts) c.moe = {4, 2, 32, f.model_type == "mixtral", {}, 0};
  return c;
}

// Each row's adapters: the modules its row names take LoRA (every one of them together), a
// module of another family's blocks is refused naming what to write instead, and GPT-2 takes
// none. The bias keys export writes are the row's.
TEST(HfConfig, EveryFamilyTakesTheAdaptersItsRowNames) {
  for (const ModelFamily& f : ModelFamilies()) {
    SCOPED_TRACE(std::string(f.model_type));
    ModelConfig c = TinyOf(f);
    c.lora.r = 8;
    c.lora.alpha = 16;
    c.lora.target_modules.assign(f.lora_targets.begin(), f.lora_targets.end());
    if (f.gpt2()) {
      c.lora.target_modules = {"q_proj"};
      EXPECT_NE(Validate(c).message().find("adapters are built for the LLaMA family"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(Validate(c).ok()) << Validate(c).ToString();
    c.lora.target_modules = {f.fused_projections ? "q_proj" : "qkv_proj"};
    EXPECT_NE(Validate(c).message().find(f.fused_projections ? "Phi-3 fuses q/k/v" : "is Phi-3's fused projection"),
              std::string::npos) << Validate(c).ToString();
    c.lora.target_modules = {"c_attn"};
    EXPECT_NE(Validate(c).message().find("\"c_attn\" is not one of"), std::string::npos) << Validate(c).ToString();
    c.lora = {};
    const nlohmann::ordered_json j = HfConfigJson(c, "float32");
    EXPECT_EQ(j.contains("attention_bias"), f.bias_keys != BiasKeys::kNone || f.gemma());  // (Gemma's own keys)
    EXPECT_EQ(j.contains("mlp_bias"), f.bias_keys == BiasKeys::kAttentionAndMlp);
    EXPECT_EQ(j.contains("sliding_window"), f.sliding_window_key);
  }
}

// One round trip of config.json per row of the family table: the config export writes reads
// back as the same model of the same family, which has what its blocks always have.
TEST(HfConfig, EveryFamilyRoundTrips) {
  EXPECT_EQ(ModelFamilies().size(), 11u);
  for (const ModelFamily& f : ModelFamilies()) {
    SCOPED_TRACE(std::string(f.model_type));
    ModelConfig c = TinyOf(f);
    c.ffn_hidden = FfnHidden(c);
    ASSERT_TRUE(Validate(c).ok()) << Validate(c).ToString();
    EXPECT_EQ(&FamilyOf(c), &f);
    EXPECT_EQ(FindFamily(f.model_type), &f);
    const nlohmann::ordered_json j = HfConfigJson(c, "float32");
    EXPECT_EQ(j["model_type"], std::string(f.model_type));
    EXPECT_EQ(j["architectures"][0], std::string(f.causal_lm));
    auto back = ModelConfigFromHf(nlohmann::json::parse(j.dump()), "x");
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << j.dump(1);
    back->seq_len = c.seq_len;
    EXPECT_EQ(&FamilyOf(*back), &f);
    EXPECT_EQ(nlohmann::json(HfConfigJson(*back, "float32")).dump(), nlohmann::json(j).dump());
    EXPECT_EQ(ModelSpec(*back).num_parameters(), ModelSpec(c).num_parameters());
    for (const ModelConfig* side : {&c, &*back}) {  // what config.json cannot say, the row holds
      EXPECT_EQ(side->qkv_bias, f.qkv_bias == Has::kAlways);
      EXPECT_EQ(side->qk_norm, f.qk_norm == Has::kAlways);
      EXPECT_EQ(IsGemma(*side), f.gemma());
      EXPECT_EQ(IsMoe(*side), f.experts);
    }
    // The family's fixed parts cannot be turned off (or on) under its name.
    ModelConfig other = c;
    other.qk_norm = !c.qk_norm;
    if (f.qk_norm != Has::kFree && !f.gpt2()) {
      EXPECT_NE(Validate(other).message().find(fmt::format("qk_norm {} with hf_model_type \"{}\"",
                                                           other.qk_norm ? "true" : "false", f.model_type)),
                std::string::npos) << Validate(other).ToString();
    }
  }
  ModelConfig unknown = TinyOf(*FindFamily("llama"));
  unknown.hf_model_type = "falcon";
  EXPECT_NE(Validate(unknown).message().find("hf_model_type \"falcon\" is not one of gpt2 (GPT2LMHeadModel), llama "
                                             "(LlamaForCausalLM)"), std::string::npos) << Validate(unknown).ToString();
}

// Gemma's keys: each family's defaults where config.json is silent, null soft-caps, the
// sliding layers from layer_types or the pattern, and what Strata does not implement named.
TEST(HfConfig, ReadsGemmaAndNamesWhatItCannotDo) {
  nlohmann::json j = Llama();
  j["model_type"] = "gemma2";
  j["architectures"] = {"Gemma2ForCausalLM"};
  j.erase("hidden_act");
  j.erase("tie_word_embeddings");
  j["sliding_window"] = 4096;
  auto g2 = ModelConfigFromHf(j, "x");
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  EXPECT_TRUE(g2->tie_embeddings);
  EXPECT_EQ(g2->head_dim, 256);
  EXPECT_TRUE(g2->gemma == (GemmaOptions{256, 50, 30, 0, {true, false}}));
  ModelConfig adapted = *g2;
  adapted.lora.r = 4;
  adapted.lora.target_modules = {"q_proj"};
  EXPECT_TRUE(Validate(adapted).ok()) << Validate(adapted).ToString();  // LoRA on Gemma's projections
  ModelConfig experts = *ModelConfigFromHf(Llama(), "x");
  experts.hf_model_type = "qwen3_moe";
  experts.qk_norm = true;  // (Qwen3-MoE's blocks always have them)
  experts.moe = {4, 2, 32, true, {}, 0};
  experts.lora.r = 4;
  experts.lora.target_modules = {"q_proj", "up_proj"};
  EXPECT_NE(Validate(experts).message().find("\"up_proj\": the experts of qwen3_moe are adapted as PEFT adapts "
                                             "transformers' fused expert tensors: strata.lora.target_parameters"),
            std::string::npos) << Validate(experts).ToString();
  experts.lora.target_modules = {"q_proj", "v_proj"};
  EXPECT_TRUE(Validate(experts).ok()) << Validate(experts).ToString();
  experts.lora.target_parameters = {"experts.gate_up_proj"};
  EXPECT_TRUE(Validate(experts).ok()) << Validate(experts).ToString();
  ModelConfig stray = *ModelConfigFromHf(Llama(), "x");
  stray.gemma.attn_softcap = 50;
  EXPECT_NE(Validate(stray).message().find("strata.model.gemma is for hf_model_type gemma2 or gemma3_text"),
            std::string::npos);
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["layer_types"] = {"full_attention", "full_attention"};
  auto plain = ModelConfigFromHf(j, "x");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(plain->gemma == (GemmaOptions{256, 0, 0, 0, {}}));
  nlohmann::json g3 = Llama();
  g3["model_type"] = "gemma3_text";
  g3["architectures"] = {"Gemma3ForCausalLM"};
  g3.erase("hidden_act");
  g3["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                           {"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}}};
  auto three = ModelConfigFromHf(g3, "x");
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_TRUE(three->qk_norm);
  EXPECT_EQ(three->rope_theta, 1e6);
  EXPECT_TRUE(three->gemma == (GemmaOptions{256, 0, 0, 10000, {true, true}}));  // every 6th layer is global
  g3["rope_parameters"]["full_attention"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  EXPECT_ERROR_HAS(g3, "\"full_attention\": rope_type \"linear\" is not supported for Gemma");
  j["hidden_activation"] = "gelu";
  EXPECT_ERROR_HAS(j, "\"hidden_activation\": \"gelu\" is not supported");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["layer_types"] = {"full_attention"};
  EXPECT_ERROR_HAS(j, "\"layer_types\" must be a list, one per layer");
}

// ModelSpec's counts (no LibTorch: the estimator's and the shard plan's) equal the blocks.
TEST(HfConfig, ParameterCountsOfTheVariantsMatchTheBlocks) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.d_model = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.seq_len = 16;
  for (int variant = 0; variant < 6; ++variant) {
    ModelConfig v = c;
    v.qkv_bias = variant == 1;
    v.qk_norm = variant >= 2 && variant != 4;
    v.head_dim = variant == 3 ? 32 : 0;  // n_head * head_dim = 128 != d_model
    v.tie_embeddings = variant % 2 == 0;
    if (variant >= 4) v.hf_model_type = variant == 4 ? "gemma2" : "gemma3_text";  // two more norms
    ASSERT_TRUE(Validate(v).ok()) << Validate(v).ToString();
    const ModelSpec spec(v);
    for (int b = 0; b < spec.num_blocks(); ++b) {
      int64_t n = 0;
      for (const auto& p : MakeBlock(spec, b)->parameters()) n += p.numel();
      EXPECT_EQ(n, spec.block_parameters(b)) << "variant " << variant << " block " << b;
    }
  }
  ModelConfig g;
  g.max_positions = 512;  // GPT-2's position table is max_positions rows, not seq_len
  const ModelSpec gs(g);
  int64_t n = 0;
  for (const auto& p : MakeBlock(gs, 0)->parameters()) n += p.numel();
  EXPECT_EQ(n, gs.block_parameters(0));
  EXPECT_EQ(n, (256 + 512) * 128);
}

}  // namespace
}  // namespace strata::model
