// The save folder's lock (durable_file.h): one run per checkpoint folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include "src/base/durable_file.h"
#include "support/temp_dir.h"

namespace strata {
namespace {

// One run per checkpoint folder: a second claim fails naming the holder's pid; the claim
// ends with its holder.
TEST(FolderLock, ASecondRunOnTheSameSaveFolderIsRefused) {
  testing::TempDir dir;
  const std::string ck = dir.path() + "/ck";
  {
    auto first = FolderLock::Take(ck);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    auto second = FolderLock::Take(ck);
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("'" + ck + "' is in use by another run (pid " + std::to_string(getpid())),
              std::string::npos) << second.status().message();
  }
  EXPECT_TRUE(FolderLock::Take(ck).ok());
}

}  // namespace
}  // namespace strata
