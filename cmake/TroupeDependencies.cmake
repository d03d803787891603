# Finds every build dependency (all from Debian packages) and wraps the ones that ship
# no CMake targets in imported targets: CAF::core, CAF::io, CAF::openssl, OpenBLAS::OpenBLAS.
# A missing package fails here with the apt package that provides it.

find_package(Threads REQUIRED)

macro(troupe_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "${what} not found. Install it with: sudo apt-get install ${package}"
                        " (or run tools/dev, which installs every dependency).")
  endif()
endmacro()

# --- CAF 0.17: no CMake package, no pkg-config file -> hand-made targets.
find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)
troupe_require(CAF_INCLUDE_DIR "CAF headers (caf/all.hpp)" libcaf-dev)
troupe_require(CAF_CORE_LIBRARY "libcaf_core" libcaf-dev)
troupe_require(CAF_IO_LIBRARY "libcaf_io" libcaf-dev)
troupe_require(CAF_OPENSSL_LIBRARY "libcaf_openssl" libcaf-dev)
file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line REGEX "#define CAF_VERSION [0-9]+")
string(REGEX MATCH "[0-9]+" CAF_VERSION_NUMBER "${_caf_version_line}")
if(NOT CAF_VERSION_NUMBER OR CAF_VERSION_NUMBER LESS 1705)
  message(FATAL_ERROR "Troupe needs CAF >= 0.17.5 (found CAF_VERSION ${CAF_VERSION_NUMBER} in "
                      "${CAF_INCLUDE_DIR}/caf/config.hpp). Install Debian 12's libcaf-dev (0.17.6).")
endif()
if(CAF_VERSION_NUMBER GREATER_EQUAL 1800)
  message(FATAL_ERROR "Troupe is written against the CAF 0.17 API; found CAF_VERSION ${CAF_VERSION_NUMBER}.")
endif()
add_library(CAF::core INTERFACE IMPORTED)
target_include_directories(CAF::core INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(CAF::core INTERFACE ${CAF_CORE_LIBRARY} Threads::Threads)
add_library(CAF::io INTERFACE IMPORTED)
target_link_libraries(CAF::io INTERFACE ${CAF_IO_LIBRARY} CAF::core)

find_package(OpenSSL QUIET)
troupe_require(OpenSSL_FOUND "OpenSSL" libssl-dev)
add_library(CAF::openssl INTERFACE IMPORTED)
target_link_libraries(CAF::openssl INTERFACE ${CAF_OPENSSL_LIBRARY} CAF::io OpenSSL::SSL OpenSSL::Crypto)

# --- OpenBLAS: the config file sets variables only.
find_package(OpenBLAS CONFIG QUIET)
troupe_require(OpenBLAS_FOUND "OpenBLAS" libopenblas-dev)
add_library(OpenBLAS::OpenBLAS INTERFACE IMPORTED)
target_include_directories(OpenBLAS::OpenBLAS INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(OpenBLAS::OpenBLAS INTERFACE ${OpenBLAS_LIBRARIES})

# --- oneDNN: bf16 products (tensor/gemm_bf16.cpp). Its CMake package wants OpenCL's
# headers, which Troupe does not use, so the header and library are found directly. It
# runs on OpenMP (GCC's libgomp); Troupe sets the calling thread's team size.
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY dnnl)
troupe_require(DNNL_INCLUDE_DIR "oneDNN headers (oneapi/dnnl/dnnl.hpp)" libdnnl-dev)
troupe_require(DNNL_LIBRARY "libdnnl" libdnnl-dev)
find_package(OpenMP REQUIRED COMPONENTS CXX)
add_library(DNNL::dnnl INTERFACE IMPORTED)
target_include_directories(DNNL::dnnl INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(DNNL::dnnl INTERFACE ${DNNL_LIBRARY} OpenMP::OpenMP_CXX)

# --- prometheus-cpp ships no version file: never pass a version here.
find_package(prometheus-cpp CONFIG QUIET)
troupe_require(prometheus-cpp_FOUND "prometheus-cpp" prometheus-cpp-dev)

find_package(CLI11 CONFIG QUIET)
troupe_require(CLI11_FOUND "CLI11" libcli11-dev)
find_package(spdlog CONFIG QUIET)
troupe_require(spdlog_FOUND "spdlog" libspdlog-dev)
find_package(tomlplusplus CONFIG QUIET)
troupe_require(tomlplusplus_FOUND "toml++" libtomlplusplus-dev)
find_package(nlohmann_json CONFIG QUIET)
troupe_require(nlohmann_json_FOUND "nlohmann-json" nlohmann-json3-dev)
find_package(ZLIB QUIET)
troupe_require(ZLIB_FOUND "zlib" zlib1g-dev)

if(TROUPE_BUILD_TESTS)
  find_package(Boost 1.74 QUIET COMPONENTS unit_test_framework)
  troupe_require(Boost_FOUND "Boost.Test" libboost-test-dev)
endif()
