# A Debian package of what `cmake --install` installs (`cpack -G DEB` in the build
# directory): the troupe binary, the CUDA module when it was built (it needs the CUDA 13
# runtime, cuBLAS, cuDNN 9 and NCCL only when --device cuda is used), libtroupe with its
# header, the Python module, the monitoring assets, the docs and the examples. Its
# dependencies are the Debian runtime packages of the libraries the binaries link
# (tests/packaging checks them against what the binary needs).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME troupe)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "Troupe maintainers <troupe@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Neural-network training on a cluster of actors (CAF)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6, libstdc++6, libgcc-s1, libcaf-core0.17, libcaf-io0.17, libcaf-openssl0.17, libcivetweb1, libfmt9, \
libopenblas0-pthread | libopenblas0, libdnnl2, libgomp1, ocl-icd-libopencl1, libprometheus-cpp-core1.0, libprometheus-cpp-pull1.0, libspdlog1.10, libssl3, libtomlplusplus3, zlib1g")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, python3, python3-numpy")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "prometheus, python3-torch")
include(CPack)
