// Skips a gpu-labelled test, saying why, where no CUDA device is usable.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "strata/cuda/cuda.h"

#define REQUIRE_GPU()                                                  \
  do {                                                                 \
    std::string why_no_gpu;                                            \
    if (!::strata::cuda::DeviceAvailable(&why_no_gpu)) GTEST_SKIP() << why_no_gpu; \
  } while (0)
