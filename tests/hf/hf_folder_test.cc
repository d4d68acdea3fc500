// Hugging Face model folders without transformers (these run in CI): a Qwen3-shaped model
// (q/k norms, head_dim != C / H, rope scaling) trained, exported as a sharded folder and read
// back through strata.model.from + --init-from DIR gives the same architecture and bitwise
// the same weights; an existing export is replaced, anything else refused; and a folder with
// a missing, an extra or a mis-shaped tensor, or an index that lies, is refused naming the
// tensor and its file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/engine_test_util.h"
#include "checkpoint/ckpt_test_util.h"
#include "src/checkpoint/checkpoint.h"
#include "src/hf/export.h"
#include "src/hf/hf_loader.h"
#include "src/checkpoint/safetensors.h"
#include "support/temp_dir.h"
#include "support/settled.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using testing::Params;
using testing::RunRanks;

TrainConfig Qwen3Config(const std::string& nvme) {
  TrainConfig c = testing::TinyConfig(nvme);
  c.compute_dtype = DType::kF32;
  model::ModelConfig& m = c.model;
  m.arch = model::Arch::kLlama;
  m.hf_model_type = "qwen3";
  m.qk_norm = true;
  m.head_dim = 32;
  m.n_kv_head = 2;
  m.ffn_hidden = 96;
  m.tie_embeddings = false;
  m.max_positions = 64;
  m.rope_scaling = model::RopeScaling::Llama3(4.0, 1.0, 4.0, 16);
  EXPECT_TRUE(model::Validate(m).ok()) << model::Validate(m).ToString();
  return c;
}

Status TrainAndCollect(const TrainConfig& cfg, int rank, Communicator& comm, int steps, const std::string& save,
                       Params* out, EngineHooks hooks = {}) {
  STRATA_ASSIGN_OR_RETURN(auto data, data::TokenDataset::Open(cfg.data, cfg.model.vocab_size, cfg.model.seq_len));
  STRATA_ASSIGN_OR_RETURN(const RunConfig settled, testing::TrySettle(cfg, comm.world_size()));
  STRATA_ASSIGN_OR_RETURN(auto engine, Engine::Create(settled, &comm, nullptr, std::move(hooks)));
  for (int64_t s = 0; s < steps; ++s) STRATA_RETURN_IF_ERROR(engine->Step(s, *data).status());
  if (!save.empty()) STRATA_RETURN_IF_ERROR(ckpt::SaveCheckpoint(*engine, comm, cfg, save, steps));
  return out ? testing::CollectMaster(*engine, rank, out) : Status();
}

class HfFolder : public ::testing::Test {
 protected:
  // A trained model exported as a folder of 3+ shards (once per test).
  void SetUp() override {
    cfg_ = Qwen3Config(dir_.path());
    ASSERT_EQ(RunRanks(2, [&](int r, Communicator& c) { return TrainAndCollect(cfg_, r, c, 2, ck(), &trained_); }), "");
    auto ex = ckpt::ExportHfFolder(ck(), folder(), {ckpt::ExportDType::kF32, 60'000, ""});
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    ASSERT_GE(ex->shards, 3);
    shards_ = ex->shards;
  }
  std::string ck() const { return dir_.path() + "/ckpt"; }
  std::string folder() const { return dir_.path() + "/hf"; }
  std::string Shard(int i) const { return fmt::format("model-{:05d}-of-{:05d}.safetensors", i, shards_); }

  // Loads folder() into a model of `m`; the error text ("" = none).
  std::string LoadError(const model::ModelConfig& m) {
    auto w = ckpt::HfWeights::Open(folder(), m);
    if (!w.ok()) return w.status().ToString();
    model::FullModel full{model::ModelSpec(m)};
    Status s = ckpt::LoadIntoModel(**w, full);
    return s.ok() ? "" : s.ToString();
  }

  // Rewrites shard `i`: `edit` may change its tensor list (names, shapes, bytes it owns).
  void RewriteShard(int i, const std::function<void(std::vector<ckpt::TensorView>&)>& edit) {
    const std::string path = folder() + "/" + Shard(i);
    std::vector<std::vector<std::byte>> keep;
    std::vector<ckpt::TensorView> views;
    {
      auto f = ckpt::SafetensorsFile::Open(path);
      ASSERT_TRUE(f.ok());
      for (const auto& t : f->tensors()) keep.emplace_back(t.bytes.begin(), t.bytes.end());
      for (size_t k = 0; k < keep.size(); ++k) {
        views.push_back(f->tensors()[k]);
        views.back().bytes = keep[k];
      }
    }
    edit(views);
    ASSERT_TRUE(ckpt::WriteSafetensors(path, views, {{"format", "pt"}}).ok());
  }

  testing::TempDir dir_;
  TrainConfig cfg_;
  Params trained_;
  int shards_ = 0;
};

TEST_F(HfFolder, ExportedFolderReadsBackBitwise) {
  for (const std::string& f : {std::string("config.json"), std::string("model.safetensors.index.json"), Shard(1)})
    EXPECT_TRUE(fs::exists(folder() + "/" + f)) << f;
  // The architecture from config.json, as `strata.model.from` reads it.
  auto read = ParseTrainConfig(R"({"strata": {"model": {"from": ")" + folder() + R"(", "seq_len": 32}}})", "test");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(ModelConfigJson(read->model).dump(), ModelConfigJson(cfg_.model).dump());
  EXPECT_EQ(read->model_from, folder());
  // The weights, through the index, shard by shard: bitwise the trained ones.
  auto w = ckpt::HfWeights::Open(folder(), cfg_.model);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const int blocks = model::ModelSpec(cfg_.model).num_blocks();
  Params loaded;
  ASSERT_EQ(RunRanks(1, [&](int r, Communicator& c) {
              return TrainAndCollect(cfg_, r, c, 0, "", &loaded, ckpt::MakeInitFromHooks(*w, blocks));
            }),
            "");
  testing::ExpectBitwiseEqual(trained_, loaded);
}

TEST_F(HfFolder, ReExportReplacesTheFolderAndRefusesAnythingElse) {
  auto again = ckpt::ExportHfFolder(ck(), folder(), {ckpt::ExportDType::kBF16, 1'000'000'000, ""});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->shards, 1);
  EXPECT_TRUE(fs::exists(folder() + "/model-00001-of-00001.safetensors"));
  EXPECT_FALSE(fs::exists(folder() + "/" + Shard(2)));  // nothing left of the old export
  for (const auto& e : fs::directory_iterator(dir_.path()))  // no temporary or set-aside folder left
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  const std::string other = dir_.path() + "/notes";
  fs::create_directories(other);
  std::ofstream(other + "/mine.txt") << "keep me";
  auto refused = ckpt::ExportHfFolder(ck(), other, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("holds 'mine.txt', which strata export did not write there"),
            std::string::npos) << refused.status().ToString();
  EXPECT_TRUE(fs::exists(other + "/mine.txt"));
  for (const auto& e : fs::directory_iterator(dir_.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(HfFolder, MissingExtraAndMisShapedTensorsAreNamedWithTheirFile) {
  // Extra: a model of one layer meets the folder's second layer.
  model::ModelConfig shallower = cfg_.model;
  shallower.n_layer = 1;
  std::string err = LoadError(shallower);
  EXPECT_NE(err.find("holds"), std::string::npos) << err;
  EXPECT_NE(err.find(":\n  'model.layers.1."), std::string::npos) << err;  // the first few, then how many more
  EXPECT_NE(err.find("] in 'model-0000"), std::string::npos) << err;
  EXPECT_NE(err.find("\n  ... and "), std::string::npos) << err;

  // Mis-shaped: the first tensor of shard 2 loses a row.
  std::string victim;
  RewriteShard(2, [&](std::vector<ckpt::TensorView>& ts) {
    victim = ts[0].name;
    ts[0].shape[0] -= 1;
    ts[0].bytes = ts[0].bytes.first(ts[0].bytes.size() / (ts[0].shape[0] + 1) * ts[0].shape[0]);
  });
  err = LoadError(cfg_.model);
  EXPECT_NE(err.find("'" + victim + "' has shape"), std::string::npos) << err;
  EXPECT_NE(err.find("(in '" + Shard(2) + "')"), std::string::npos) << err;
  EXPECT_NE(err.find(folder()), std::string::npos) << err;

  // Missing: shard 2 without that tensor (and the index without it).
  RewriteShard(2, [](std::vector<ckpt::TensorView>& ts) { ts.erase(ts.begin()); });
  {
    auto index = nlohmann::json::parse(std::ifstream(folder() + "/model.safetensors.index.json"));
    index["weight_map"].erase(victim);
    std::ofstream(folder() + "/model.safetensors.index.json") << index.dump();
  }
  err = LoadError(cfg_.model);
  EXPECT_NE(err.find("missing tensor '" + victim + "'"), std::string::npos) << err;

  // An index that places a tensor in a shard that lacks it.
  {
    auto index = nlohmann::json::parse(std::ifstream(folder() + "/model.safetensors.index.json"));
    index["weight_map"][victim] = Shard(3);
    std::ofstream(folder() + "/model.safetensors.index.json") << index.dump();
  }
  err = LoadError(cfg_.model);
  EXPECT_NE(err.find("places tensor '" + victim + "' in '" + folder() + "/" + Shard(3) + "', which does not hold it"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace strata
