# Finds LibTorch and defines strata::torch: torch_cpu + c10 (and, with STRATA_CUDA, torch_cuda
# + c10_cuda).
#
# PyPI's torch wheel is a CUDA build; TorchConfig.cmake would go looking for the CUDA
# toolkit, cuDNN and NVTX even for a CPU build, and `import torch` fails without the CUDA
# wheels. So we ask Python only where the package lives (the same folder that
# torch.utils.cmake_prefix_path names, found without importing torch) and import the two
# libraries a CPU build needs ourselves. Debian's libtorch-dev is the fallback.
set(STRATA_PYTHON "python3" CACHE FILEPATH "Python interpreter whose site-packages hold torch")

execute_process(
  COMMAND "${STRATA_PYTHON}" -c
    "import importlib.util, os; s = importlib.util.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
  OUTPUT_VARIABLE _strata_torch_dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)

if(_strata_torch_dir AND EXISTS "${_strata_torch_dir}/lib/libtorch_cpu.so")
  set(STRATA_TORCH_DIR "${_strata_torch_dir}")
  set(STRATA_TORCH_CMAKE_PREFIX "${_strata_torch_dir}/share/cmake")
  # Headers only (e.g. the version header for `strata doctor`), without linking LibTorch.
  add_library(strata_torch_headers INTERFACE)
  target_include_directories(strata_torch_headers SYSTEM INTERFACE
    "${STRATA_TORCH_DIR}/include" "${STRATA_TORCH_DIR}/include/torch/csrc/api/include")
  target_compile_definitions(strata_torch_headers INTERFACE _GLIBCXX_USE_CXX11_ABI=1 STRATA_HAVE_TORCH=1)
  add_library(strata::torch_headers ALIAS strata_torch_headers)
  add_library(strata_torch_imported INTERFACE)
  target_link_libraries(strata_torch_imported INTERFACE strata_torch_headers
    "${STRATA_TORCH_DIR}/lib/libtorch_cpu.so" "${STRATA_TORCH_DIR}/lib/libc10.so")
  target_link_options(strata_torch_imported INTERFACE "LINKER:-rpath,${STRATA_TORCH_DIR}/lib")
  if(STRATA_CUDA)
    # LibTorch's CUDA half, linked even though nothing references it by name: loading it
    # registers the CUDA hooks that LibTorch's device-generic API (tensors on "cuda",
    # c10::Stream) dispatches through. Its own CUDA dependencies (cuDNN, cuBLAS, ...) are
    # found at run time through its RUNPATH; where they are absent (a build machine without
    # the CUDA wheels) the link still succeeds.
    target_link_libraries(strata_torch_imported INTERFACE "-Wl,--no-as-needed"
      "${STRATA_TORCH_DIR}/lib/libtorch_cuda.so" "${STRATA_TORCH_DIR}/lib/libc10_cuda.so" "-Wl,--as-needed")
    target_link_options(strata_torch_imported INTERFACE "LINKER:--allow-shlib-undefined")
    message(STATUS "Strata: CUDA build, linking torch_cuda + c10_cuda")
  endif()
  add_library(strata::torch ALIAS strata_torch_imported)
  message(STATUS "Strata: LibTorch from ${STRATA_TORCH_DIR} (torch_cpu + c10)")
else()
  find_package(Torch QUIET)  # Debian's libtorch-dev
  if(NOT Torch_FOUND)
    message(FATAL_ERROR "Strata: LibTorch not found. Run scripts/setup.sh (installs torch==2.11.0 into .venv) "
                        "or install Debian's libtorch-dev, or configure with -DSTRATA_WITH_TORCH=OFF.")
  endif()
  add_library(strata_torch_imported INTERFACE)
  target_link_libraries(strata_torch_imported INTERFACE ${TORCH_LIBRARIES})
  target_compile_definitions(strata_torch_imported INTERFACE STRATA_HAVE_TORCH=1)
  add_library(strata::torch ALIAS strata_torch_imported)
  add_library(strata_torch_headers INTERFACE)
  target_include_directories(strata_torch_headers INTERFACE ${TORCH_INCLUDE_DIRS})
  target_compile_definitions(strata_torch_headers INTERFACE STRATA_HAVE_TORCH=1)
  add_library(strata::torch_headers ALIAS strata_torch_headers)
  message(STATUS "Strata: LibTorch from Debian's libtorch-dev (fallback)")
endif()
