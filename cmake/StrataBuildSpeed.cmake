# Build time on a small machine (2 cores, empty compiler cache): most of it went to parsing
# LibTorch's headers again in each of ~30 translation units (about 13 s each) and to parsing
# the same standard, JSON and fmt headers in ~100 small ones. Two remedies, both without any
# change to the code that is generated:
#  - STRATA_TORCH_PCH: the LibTorch headers are precompiled once (strata_torch_pch) and every
#    target that includes LibTorch reuses that one header (strata_torch_units); GCC refuses a
#    precompiled header built with other flags (-Winvalid-pch says so) and parses the header
#    instead, so a mismatch costs time, never correctness.
#  - STRATA_UNITY: the libraries of src/ and bench/ compile a few sources per unit
#    (CMake's unity build), so shared headers are parsed once per batch, and each test suite
#    is one unit (strata_unity_suite). The kernels (per-ISA flags per file) stay one unit per
#    file.
# Both are on by default; turn them off to see each file compiled on its own
# (-DSTRATA_UNITY=OFF -DSTRATA_TORCH_PCH=OFF), e.g. for include-what-you-use work.
option(STRATA_UNITY "Compile src/ and bench/ as unity builds (a few sources per unit)" ON)
option(STRATA_TORCH_PCH "Precompile LibTorch's headers once for every unit that includes them" ON)
set(STRATA_UNITY_BATCH 8 CACHE STRING "Sources per unity unit")

# The LibTorch headers Strata's sources include, precompiled. Narrow ones on purpose:
# torch/torch.h (the whole C++ API: data loaders, every nn module, serialization) is a
# 724 MB precompiled header that takes 5 s to load in each unit; these take 2.6 s.
set(STRATA_TORCH_PCH_HEADERS <torch/types.h> <torch/utils.h> <torch/nn/module.h> <torch/nn/functional/loss.h>
    <torch/nn/utils/clip_grad.h> <torch/optim/adamw.h>)

# Call after strata_headers exists.
function(strata_define_torch_pch)
  if(NOT STRATA_WITH_TORCH OR NOT STRATA_TORCH_PCH OR TARGET strata_torch_pch)
    return()
  endif()
  add_library(strata_torch_pch OBJECT ${CMAKE_SOURCE_DIR}/cmake/torch_pch.cc)
  # The flags every user of the header has (strata_torch_units adds them to each).
  target_link_libraries(strata_torch_pch PRIVATE strata_headers strata::torch_headers OpenMP::OpenMP_CXX)
  target_precompile_headers(strata_torch_pch PRIVATE ${STRATA_TORCH_PCH_HEADERS})
endfunction()

# A target some of whose sources include LibTorch: same flags as the precompiled header
# (OpenMP's included: ATen's parallel_for is an OpenMP loop where _OPENMP is defined), and
# the header itself.
function(strata_torch_units target)
  target_link_libraries(${target} PRIVATE strata_headers strata::torch_headers OpenMP::OpenMP_CXX)
  if(TARGET strata_torch_pch)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      # GCC takes a precompiled header only with the same code model: an executable's units
      # compile position-independent like the libraries' (-fPIC; linked into a PIE all the
      # same), so that one header serves both.
      set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
    endif()
    target_precompile_headers(${target} REUSE_FROM strata_torch_pch)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Winvalid-pch>)
  endif()
endfunction()

# Unity build for the targets created in the calling directory and below.
macro(strata_unity_here)
  if(STRATA_UNITY)
    set(CMAKE_UNITY_BUILD ON)
    set(CMAKE_UNITY_BUILD_BATCH_SIZE ${STRATA_UNITY_BATCH})
  endif()
endmacro()

# A test suite compiled as one unit: its files instantiate the same GoogleTest, LibTorch and
# helper templates, which a unit per file compiled and optimised again for each (five files of
# tests/hf: 89 s apart, 26 s as one unit).
function(strata_unity_suite target)
  if(STRATA_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  endif()
endfunction()
