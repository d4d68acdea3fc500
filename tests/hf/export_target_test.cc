// Where an export writes: never inside the checkpoint it reads nor over a folder holding it;
// an existing output replaced only when an earlier export wrote all of it (or --overwrite);
// temporaries removed on every way out; the checkpoint's 'latest' read within bounds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "src/hf/export_target.h"
#include "src/checkpoint/manifest.h"
#include "src/checkpoint/safetensors.h"
#include "support/temp_dir.h"

namespace strata::ckpt {
namespace {
namespace fs = std::filesystem;

// A save folder as train --save leaves it: latest + step folders with manifests.
std::string FakeSaveFolder(const std::string& root) {
  const std::string ck = root + "/ck";
  for (const char* step : {"step_00000005", "step_00000010"}) {
    fs::create_directories(ck + "/" + step);
    std::ofstream(ck + "/" + step + "/manifest.json") << "{}";
    std::ofstream(ck + "/" + step + "/rank0.safetensors") << "x";
  }
  std::ofstream(ck + "/latest") << "step_00000010\n";
  return ck;
}

TEST(ExportTarget, TheOutputMayNeitherLieInsideTheCheckpointNorHoldIt) {
  testing::TempDir dir;
  const std::string ck = FakeSaveFolder(dir.path()), step = ck + "/step_00000010";
  for (const std::string& out : {step + "/rank0.safetensors", step, ck + "/step_00000005/x.safetensors", ck + "/",
                                 ck + "/../ck/export"}) {
    const Status s = CheckExportTarget(out, ck, step, {}, "", false);
    EXPECT_FALSE(s.ok()) << out;
    EXPECT_NE(s.message().find("lies inside the checkpoint folder"), std::string::npos) << s.ToString();
  }
  const Status holds = CheckExportTarget(dir.path(), step, step, {}, "", false);
  EXPECT_NE(holds.message().find("holds the checkpoint"), std::string::npos) << holds.ToString();
  EXPECT_TRUE(CheckExportTarget(dir.path() + "/ck2", ck, step, {}, "", false).ok());
  EXPECT_TRUE(CheckExportTarget(dir.path() + "/export.safetensors", step, step, {}, "", false).ok());
}

// The folder a run was trained from (its hf_source, an earlier export or not) is no output,
// nor is anything in it or holding it, unless --overwrite; --hf-source names a base too.
TEST(ExportTarget, TheBaseFolderTheCheckpointWasTrainedFromIsNotReplaced) {
  testing::TempDir dir;
  const std::string ck = FakeSaveFolder(dir.path()), step = ck + "/step_00000010";
  const std::string base = dir.path() + "/base", other = dir.path() + "/other";
  const nlohmann::json manifest = {{"hf_source", base}};
  for (const std::string& out : {base, base + "/", base + "/model.safetensors", dir.path() + "/../" +
                                 fs::path(dir.path()).filename().string() + "/base"}) {
    const Status s = CheckExportTarget(out, ck, step, manifest, "", false);
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << out;
    EXPECT_NE(s.message().find("the Hugging Face folder '" + base + "' (the hf_source of '" + step + "')"),
              std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("--overwrite"), std::string::npos) << s.ToString();
    EXPECT_TRUE(CheckExportTarget(out, ck, step, manifest, "", true).ok()) << out;
  }
  const Status holds = CheckExportTarget(dir.path() + "/models", ck, step, {{"hf_source", dir.path() + "/models/base"}},
                                         "", false);
  EXPECT_NE(holds.message().find("holds the Hugging Face folder"), std::string::npos) << holds.ToString();
  EXPECT_TRUE(CheckExportTarget(other, ck, step, manifest, "", false).ok());
  const Status option = CheckExportTarget(other, ck, step, {}, other, false);
  EXPECT_NE(option.message().find("(--hf-source)"), std::string::npos) << option.ToString();
}

TEST(ExportTarget, AFolderStrataExportDidNotWriteIsNotReplaced) {
  testing::TempDir dir;
  const std::string model = dir.path() + "/Llama-3.2-1B";  // the folder a run was fine-tuned from
  fs::create_directories(model + "/original");
  std::ofstream(model + "/config.json") << "{}";
  std::ofstream(model + "/LICENSE") << "keep me";
  auto refused = OutFolder::Make(model, "a model folder", /*overwrite=*/false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("exists and holds '"), std::string::npos) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("which strata export did not write there: not replaced"),
            std::string::npos);
  EXPECT_NE(refused.status().message().find("--overwrite"), std::string::npos);
  EXPECT_EQ(testing::EntryNames(model), (std::vector<std::string>{"LICENSE", "config.json", "original"}));
  EXPECT_EQ(testing::EntryNames(dir.path()), (std::vector<std::string>{"Llama-3.2-1B"}));  // no temporary made
}

TEST(ExportTarget, AnEarlierExportIsReplacedButNotOnceSomethingWasAdded) {
  testing::TempDir dir;
  const std::string out = dir.path() + "/export";
  for (const char* text : {"first", "second"}) {
    auto f = OutFolder::Make(out, "a model folder", false);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->Write("config.json", text).ok());
    ASSERT_TRUE(f->Publish().ok());
  }
  EXPECT_EQ(testing::EntryNames(out), (std::vector<std::string>{".strata-export.json", "config.json"}));
  EXPECT_EQ(testing::EntryNames(dir.path()), (std::vector<std::string>{"export"}));  // the old one and the temporary are gone
  std::ofstream(out + "/README.md") << "my notes";
  auto refused = OutFolder::Make(out, "a model folder", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("holds 'README.md'"), std::string::npos) << refused.status().ToString();
  auto kind = OutFolder::Make(out + "-other", "a model folder", false);
  ASSERT_TRUE(kind.ok());
  // An adapter folder does not replace a model folder.
  fs::remove(out + "/README.md");
  auto peft = OutFolder::Make(out, "a PEFT adapter folder", false);
  ASSERT_FALSE(peft.ok());
  EXPECT_NE(peft.status().message().find("is a model folder written by strata export, not a PEFT adapter folder"),
            std::string::npos) << peft.status().ToString();
  // Told to, it replaces anything.
  std::ofstream(out + "/README.md") << "my notes";
  auto forced = OutFolder::Make(out, "a PEFT adapter folder", /*overwrite=*/true);
  ASSERT_TRUE(forced.ok());
  ASSERT_TRUE(forced->Write("adapter_config.json", "{}").ok());
  ASSERT_TRUE(forced->Publish().ok());
  EXPECT_EQ(testing::EntryNames(out), (std::vector<std::string>{".strata-export.json", "adapter_config.json"}));
}

TEST(ExportTarget, AnUnpublishedFolderLeavesNothingBehind) {
  testing::TempDir dir;
  {
    auto f = OutFolder::Make(dir.path() + "/out", "a model folder", false);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Write("config.json", "{}").ok());
    EXPECT_EQ(testing::EntryNames(dir.path()).size(), 1u);  // the temporary
  }  // an error before Publish
  EXPECT_TRUE(testing::EntryNames(dir.path()).empty());
}

TEST(ExportTarget, AFileIsReplacedOnlyWhenStrataExportWroteIt) {
  testing::TempDir dir;
  const std::string mine = dir.path() + "/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(mine, {}, {{"format", "pt"}}).ok());  // transformers' own, say
  auto refused = OutFile::Make(mine, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("was not written by strata export"), std::string::npos);
  const std::string ours = dir.path() + "/export.safetensors";
  for (int i = 0; i < 2; ++i) {
    auto f = OutFile::Make(ours, false);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(WriteSafetensors(f->tmp(), {}, ExportMetadata()).ok());
    ASSERT_TRUE(f->Publish().ok());
  }
  EXPECT_EQ(testing::EntryNames(dir.path()), (std::vector<std::string>{"export.safetensors", "model.safetensors"}));
  EXPECT_TRUE(OutFile::Make(mine, /*overwrite=*/true).ok());
}

TEST(Manifest, AnOversizedLatestIsRefusedWithoutQuotingIt) {
  testing::TempDir dir;
  const std::string ck = FakeSaveFolder(dir.path());
  std::ofstream(ck + "/latest", std::ios::trunc) << std::string(50 << 20, 's');
  auto r = ResolveStepDir(ck);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than a 'latest' file can be"), std::string::npos) << r.status().message().substr(0, 500);
  EXPECT_LT(r.status().message().size(), 400u);
  std::ofstream(ck + "/latest", std::ios::trunc) << std::string(3000, 'q') << "/x";
  auto garbage = ResolveStepDir(ck);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("does not name a step folder: \"qqq"), std::string::npos);
  EXPECT_LT(garbage.status().message().size(), 400u);
}

}  // namespace
}  // namespace strata::ckpt
