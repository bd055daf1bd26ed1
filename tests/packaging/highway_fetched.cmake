# packaging.highway_fetched: mixprec on a system without Highway fetches the pinned release
# (cmake/MixprecHighway.cmake), and its installed package works. CI cannot reach GitHub: the
# download is Debian 13's highway_<version>.orig.tar.gz, byte for byte the GitHub archive, put in
# HIGHWAY_ARCHIVE by scripts/install_deps.sh (scripts/lib/highway_source.sh) and handed over as
# MIXPREC_HIGHWAY_URL=file://..., so FetchContent still checks the pinned SHA256. The system's
# Highway (libhwy-dev) is hidden with CMAKE_DISABLE_FIND_PACKAGE_hwy, so MIXPREC_HIGHWAY=AUTO must
# fall back to the fetch. mixprec::core (no LibTorch) is built and installed, with Highway beside
# it; a consumer of the package links and runs it. Checks that the fetched Highway was used: the
# headers compiled, the hwy package the consumer found, the library linked.
# Without the archive: fails on Debian 12, where install_deps.sh fetches it; skips elsewhere.
if(NOT EXISTS "${HIGHWAY_ARCHIVE}")
  file(STRINGS /etc/os-release codename REGEX "^VERSION_CODENAME=")
  if(codename STREQUAL "VERSION_CODENAME=bookworm")
    message(FATAL_ERROR "${HIGHWAY_ARCHIVE} is missing: run scripts/install_deps.sh (as root), "
                        "which fetches it with scripts/lib/highway_source.sh")
  endif()
  message("SKIP: packaging.highway_fetched needs ${HIGHWAY_ARCHIVE}, which scripts/install_deps.sh "
          "fetches on Debian 12 only; it runs in the Debian 12 stage of scripts/test.sh")
  return()
endif()

set(work ${WORK_DIR}/highway_fetched)
file(REMOVE_RECURSE ${work})
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

set(build ${work}/mixprec-build)
set(prefix ${work}/prefix)
run(${CMAKE_COMMAND} -S ${MIXPREC_SOURCE_DIR} -B ${build} -G ${GENERATOR}
    -DMIXPREC_WITH_TORCH=OFF -DMIXPREC_WITH_CUDA=OFF -DMIXPREC_BUILD_TESTS=OFF
    -DMIXPREC_BUILD_EXAMPLES=OFF -DMIXPREC_BUILD_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS=${BUILD_CXX_FLAGS}"
    -DCMAKE_DISABLE_FIND_PACKAGE_hwy=ON -DMIXPREC_HIGHWAY=AUTO
    -DMIXPREC_HIGHWAY_URL=file://${HIGHWAY_ARCHIVE})
if(NOT out MATCHES "mixprec: Highway: fetched \\(file://")
  message(FATAL_ERROR "mixprec's configure did not report the fetched Highway:\n${out}")
endif()
run(${CMAKE_COMMAND} --build ${build})
run(${CMAKE_COMMAND} --install ${build} --prefix ${prefix})
set(consumer ${work}/consumer-build)
run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/consumer -B ${consumer} -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCONSUMER_MODE=find_package -DWITH_TORCH=OFF -DWITH_CUDA=OFF
    -DWITH_DISTRIBUTED=OFF)
run(${CMAKE_COMMAND} --build ${consumer})

# ---- the fetched Highway was used ------------------------------------------------------------
# 1. mixprec's SIMD code compiled Highway's headers from the fetched sources, none from /usr.
set(hwy_src ${build}/_deps/hwy-src)
find_program(NINJA ninja)
if(GENERATOR STREQUAL "Ninja" AND NINJA)
  run(${NINJA} -C ${build} -t deps CMakeFiles/mixprec_core.dir/src/cpu/unscale_simd.cpp.o)
  if(NOT out MATCHES "${hwy_src}/hwy/highway.h" OR out MATCHES "/usr/include/hwy/")
    message(FATAL_ERROR "unscale_simd.cpp did not take Highway's headers from ${hwy_src} "
                        "alone:\n${out}")
  endif()
endif()
# 2. The installed package brought the fetched Highway; the consumer found that one.
file(STRINGS ${consumer}/CMakeCache.txt hwy_dir REGEX "^hwy_DIR:PATH=")
if(NOT hwy_dir MATCHES "^hwy_DIR:PATH=${prefix}/")
  message(FATAL_ERROR "the consumer found Highway's package elsewhere than in ${prefix}: ${hwy_dir}")
endif()
# 3. The consumer linked the installed static libhwy.a, not Debian's libhwy.so, and runs.
if(GENERATOR STREQUAL "Ninja" AND NINJA)
  run(${NINJA} -C ${consumer} -t commands consumer_core)
  if(NOT out MATCHES "${prefix}/lib[^ ]*/libhwy\\.a")
    message(FATAL_ERROR "consumer_core was not linked with ${prefix}'s libhwy.a:\n${out}")
  endif()
endif()
run(readelf -d ${consumer}/consumer_core)
if(out MATCHES "libhwy")
  message(FATAL_ERROR "consumer_core needs a shared Highway:\n${out}")
endif()
run(${consumer}/consumer_core)
message(STATUS "${out}")
run(${consumer}/consumer_core_other_abi)
message(STATUS "${out}")
message(STATUS "mixprec and its consumer used the Highway fetched from file://${HIGHWAY_ARCHIVE}")
