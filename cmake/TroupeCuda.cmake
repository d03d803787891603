# Resolves TROUPE_WITH_CUDA (AUTO/ON/OFF) into TROUPE_CUDA_ENABLED.
# AUTO turns CUDA on when nvcc and the toolkit are found; ON fails loudly when they are not.
# Architectures default to 80;90 (A100, H100/H200) and must be set before CUDA is enabled.

set(TROUPE_CUDA_ENABLED OFF)
if(NOT TROUPE_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(TROUPE_CUDA_ENABLED ON)
    endif()
  endif()
  if(TROUPE_WITH_CUDA STREQUAL "ON" AND NOT TROUPE_CUDA_ENABLED)
    message(FATAL_ERROR "TROUPE_WITH_CUDA=ON but no CUDA toolkit was found (looked for nvcc on PATH, "
                        "$CUDACXX and /usr/local/cuda/bin/nvcc). Install the toolkit or use -DTROUPE_WITH_CUDA=OFF.")
  endif()
endif()
message(STATUS "Troupe CUDA backend: ${TROUPE_CUDA_ENABLED} (TROUPE_WITH_CUDA=${TROUPE_WITH_CUDA})")
