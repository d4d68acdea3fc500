// Every tensor of an exported (or transformers-written) folder's safetensors shards, by name:
// shared by the Hugging Face tests that compare two folders tensor by tensor.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "src/checkpoint/safetensors.h"

namespace strata::testing {

// The tensors of `folder`'s model-*.safetensors shards by name; the files stay open in `files`.
// A shard that does not open is a test failure (and is left out).
inline std::map<std::string, const ckpt::TensorView*> FolderTensors(const std::string& folder,
                                                                    std::vector<ckpt::SafetensorsFile>* files) {
  files->reserve(64);
  std::map<std::string, const ckpt::TensorView*> out;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("model-", 0) != 0 || e.path().extension() != ".safetensors") continue;
    auto f = ckpt::SafetensorsFile::Open(e.path().string());
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) continue;
    files->push_back(std::move(*f));
    for (const ckpt::TensorView& t : files->back().tensors()) out[t.name] = &t;
  }
  return out;
}

}  // namespace strata::testing
