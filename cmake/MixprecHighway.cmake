# Highway for mixprec::core: the system's (find_package(hwy)), or the pinned release fetched with
# FetchContent where there is none (MIXPREC_HIGHWAY=AUTO, the default) or where asked (FETCH).
# Either way mixprec_core links hwy::hwy (docs/install.md, "Highway").

# The release fetched. Its GitHub archive is byte for byte Debian 13's highway_1.2.0.orig.tar.gz
# (same SHA256), which is how tests/packaging builds this path without reaching GitHub
# (scripts/lib/highway_source.sh). scripts/lib/highway_source.sh reads these two lines.
set(MIXPREC_HIGHWAY_VERSION 1.2.0)
set(MIXPREC_HIGHWAY_SHA256 7e0be78b8318e8bdbf6fa545d2ecb4c90f947df03f7aadc42c1967f019e63343)

set(MIXPREC_HIGHWAY AUTO CACHE STRING
  "Highway: AUTO (the system's, else fetch ${MIXPREC_HIGHWAY_VERSION}), SYSTEM (find_package only), FETCH")
set_property(CACHE MIXPREC_HIGHWAY PROPERTY STRINGS AUTO SYSTEM FETCH)
set(MIXPREC_HIGHWAY_URL
  "https://github.com/google/highway/archive/refs/tags/${MIXPREC_HIGHWAY_VERSION}.tar.gz"
  CACHE STRING "Highway's release archive, for MIXPREC_HIGHWAY=FETCH (or AUTO without a system Highway); a mirror or file:// copy must have the pinned SHA256")

# mixprec_provide_highway(): makes hwy::hwy exist; sets MIXPREC_HIGHWAY_FROM in the caller to
# "system (<hwy_DIR>)", "fetched (<url>)" or "the parent project's hwy::hwy".
function(mixprec_provide_highway)
  if(NOT MIXPREC_HIGHWAY MATCHES "^(AUTO|SYSTEM|FETCH)$")
    message(FATAL_ERROR "mixprec: MIXPREC_HIGHWAY must be AUTO, SYSTEM or FETCH, got "
                        "'${MIXPREC_HIGHWAY}'")
  endif()
  # A parent project that made Highway available itself (its own FetchContent) keeps its copy.
  if(TARGET hwy::hwy AND NOT MIXPREC_HIGHWAY STREQUAL "FETCH")
    set(MIXPREC_HIGHWAY_FROM "the parent project's hwy::hwy" PARENT_SCOPE)
    return()
  endif()
  if(NOT MIXPREC_HIGHWAY STREQUAL "FETCH")
    if(MIXPREC_HIGHWAY STREQUAL "SYSTEM")
      find_package(hwy REQUIRED)
    else()
      find_package(hwy QUIET)
    endif()
    if(hwy_FOUND)
      set(MIXPREC_HIGHWAY_FROM "system (${hwy_DIR})" PARENT_SCOPE)
      return()
    endif()
    message(STATUS "mixprec: no Highway found (find_package(hwy)); fetching Highway "
                   "${MIXPREC_HIGHWAY_VERSION} (MIXPREC_HIGHWAY=AUTO)")
  endif()
  if(TARGET hwy)
    message(FATAL_ERROR "mixprec: MIXPREC_HIGHWAY=FETCH, but this project already has a target "
                        "named hwy; use MIXPREC_HIGHWAY=AUTO to link the existing hwy::hwy")
  endif()
  include(FetchContent)
  # Only the library: no tests (which would fetch GoogleTest), examples or contrib. Its install
  # rules follow MIXPREC_INSTALL: an installed static mixprec::core names hwy::hwy on its link
  # line, so the fetched Highway is installed beside it (its own hwy-config.cmake, found by
  # mixprecConfig.cmake's find_dependency(hwy)). Function-scoped variables: nothing reaches the
  # parent project's cache; CMP0077 and CMP0126 NEW let them set Highway's option()s and
  # set(CACHE)s (its cmake_minimum_required(3.10) leaves both OLD).
  set(CMAKE_POLICY_DEFAULT_CMP0077 NEW)
  set(CMAKE_POLICY_DEFAULT_CMP0126 NEW)
  set(HWY_ENABLE_TESTS OFF)
  set(HWY_ENABLE_EXAMPLES OFF)
  set(HWY_ENABLE_CONTRIB OFF)
  set(HWY_ENABLE_INSTALL ${MIXPREC_INSTALL})
  set(HWY_FORCE_STATIC_LIBS ON)
  set(BUILD_SHARED_LIBS OFF)
  set(BUILD_TESTING OFF)
  set(CMAKE_POSITION_INDEPENDENT_CODE ON)  # linked into mixprec's PIC libraries
  set(timestamps "")
  if(NOT CMAKE_VERSION VERSION_LESS 3.24)
    set(timestamps DOWNLOAD_EXTRACT_TIMESTAMP TRUE)  # CMP0135's NEW behaviour
  endif()
  FetchContent_Declare(hwy URL "${MIXPREC_HIGHWAY_URL}" URL_HASH SHA256=${MIXPREC_HIGHWAY_SHA256}
                       ${timestamps})
  FetchContent_MakeAvailable(hwy)
  # Highway always defines hwy_test and hwy_list_targets: built only when asked for. (Not the
  # whole directory: an EXCLUDE_FROM_ALL directory's install rules are skipped.)
  foreach(target hwy_test hwy_list_targets)
    if(TARGET ${target})
      set_property(TARGET ${target} PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  if(NOT TARGET hwy::hwy)  # Highway 1.2 exports hwy::hwy but defines no such alias itself
    add_library(hwy::hwy ALIAS hwy)
  endif()
  if(FETCHCONTENT_SOURCE_DIR_HWY)
    set(MIXPREC_HIGHWAY_FROM "fetched (FETCHCONTENT_SOURCE_DIR_HWY=${FETCHCONTENT_SOURCE_DIR_HWY})"
        PARENT_SCOPE)
  else()
    set(MIXPREC_HIGHWAY_FROM "fetched (${MIXPREC_HIGHWAY_URL})" PARENT_SCOPE)
  endif()
endfunction()
