// `strata estimate --max-seq` (src/estimate/longest_sequence.h): the search finds the last
// length that fits to the token, whatever the threshold, and names why the next does not; and
// on a real config the tiled loss lets a longer sequence fit than the untiled head.
#include <gtest/gtest.h>

#include "src/estimate/longest_sequence.h"
#include "src/settle/settle.h"

namespace strata {
namespace {

TEST(LongestSequence, FindsTheLastLengthThatFitsToTheToken) {
  for (int64_t limit : {int64_t{127}, kShortestSequence, int64_t{129}, int64_t{4096}, int64_t{100003}, kLongestSequenceTried}) {
    SCOPED_TRACE(limit);
    int calls = 0;
    const LongestSequence s = FindLongestSequence([&](int64_t tokens, std::string* bound) -> std::optional<MemoryEstimate> {
      ++calls;
      if (tokens > limit) {
        *bound = "too long: " + std::to_string(tokens);
        return std::nullopt;
      }
      MemoryEstimate e;
      e.activations = static_cast<uint64_t>(tokens);
      return e;
    });
    EXPECT_EQ(s.tokens, limit < kShortestSequence ? 0 : limit);
    if (limit >= kShortestSequence) {
      EXPECT_EQ(s.estimate.activations, static_cast<uint64_t>(limit));
    }
    if (limit < kLongestSequenceTried) {
      EXPECT_EQ(s.bound, "too long: " + std::to_string(std::max(limit, kShortestSequence - 1) + 1));
    } else {  // (the search no longer tries lengths past the longest Strata accepts, where it aborted)
      EXPECT_EQ(s.bound, "1048576 tokens is the longest sequence Strata accepts (strata.model.seq_len)");
    }
    EXPECT_LE(calls, 60);
  }
}

// With sequence_parallel_size S only multiples of S are lengths a run takes: the search tries
// only those (an odd length's refusal would otherwise cut the bisection short) and finds the
// last multiple that fits.
TEST(LongestSequence, StepsByTheSequenceGroupsSize) {
  for (int64_t step : {int64_t{2}, int64_t{8}}) {
    for (int64_t limit : {int64_t{4097}, int64_t{100003}}) {
      SCOPED_TRACE(::testing::Message() << "step " << step << ", limit " << limit);
      const LongestSequence s = FindLongestSequence(
          [&](int64_t tokens, std::string* bound) -> std::optional<MemoryEstimate> {
            EXPECT_EQ(tokens % step, 0) << tokens;
            if (tokens > limit || tokens % step != 0) {
              *bound = "too long: " + std::to_string(tokens);
              return std::nullopt;
            }
            return MemoryEstimate{};
          },
          step);
      EXPECT_EQ(s.tokens, limit / step * step);
      EXPECT_EQ(s.bound, "too long: " + std::to_string(limit / step * step + step));
    }
  }
}

TEST(LongestSequence, TheTiledLossFitsLongerSequences) {
  auto written = ParseTrainConfig(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
      "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}},
      "strata": {"model": {"arch": "llama", "vocab_size": 32000, "seq_len": 128, "n_layer": 2, "d_model": 256,
                           "n_head": 4}}})", "test");
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  MachineCapacity m;
  m.host_available = uint64_t{8} << 30;
  auto longest = [&](int64_t loss_chunk) {
    TrainConfig c = *written;
    c.loss_chunk = loss_chunk;
    return FindLongestSequence(SettledFitsAtLength(c, {1, 1, false, {true}, &m, 0}));
  };
  const LongestSequence untiled = longest(0), tiled = longest(-1);
  EXPECT_GT(untiled.tokens, 1000);
  EXPECT_GT(tiled.tokens, 2 * untiled.tokens);  // the head's 3 x T x V x 4 B dominated
  EXPECT_NE(untiled.bound.find("host memory"), std::string::npos) << untiled.bound;
}

}  // namespace
}  // namespace strata
