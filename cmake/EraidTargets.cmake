# Compile options shared by every eraid target, and the sanitizer switch.
set(ERAID_WARNINGS -Wall -Wextra -Wno-missing-field-initializers)
if(ERAID_WERROR)
  list(APPEND ERAID_WARNINGS -Werror)
endif()
# GCC 12 at -O3 (Release) reports `"text" + std::string` as an overlapping memcpy of
# exabytes (GCC bug 105329, fixed in 13): the warning is off for that compiler only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND ERAID_WARNINGS -Wno-restrict)
endif()

if(ERAID_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(ERAID_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(ERAID_SANITIZE STREQUAL "fuzzer")
  # libFuzzer (clang): everything instrumented for coverage, ASan and UBSan; only the
  # fuzz targets link libFuzzer's main (tests/fuzz).
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ERAID_SANITIZE=fuzzer needs clang (CC=clang CXX=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT ERAID_SANITIZE STREQUAL "")
  message(FATAL_ERROR "ERAID_SANITIZE must be '', 'address', 'thread' or 'fuzzer'")
endif()
if(NOT ERAID_SANITIZE STREQUAL "")
  # Line tables are all a sanitizer's report needs; full debug info (-g) only slows the
  # three sanitizer builds that CI's time budget has to hold.
  add_compile_options(-g1)
endif()

# Invariant checks (common/check.h): Debug and sanitizer builds, or ERAID_CHECKS=ON.
if(ERAID_CHECKS OR NOT ERAID_SANITIZE STREQUAL "" OR CMAKE_BUILD_TYPE STREQUAL "Debug")
  add_compile_definitions(ERAID_CHECKS)
endif()

# nbdkit is not built with sanitizers: to load a sanitized plugin, the tests that start it
# preload the runtime into it (tools/serve.cc reads ERAID_NBDKIT_PRELOAD).
set(ERAID_NBDKIT_PRELOAD "")
if(ERAID_SANITIZE STREQUAL "address")
  set(_runtimes libasan.so libubsan.so)
elseif(ERAID_SANITIZE STREQUAL "thread")
  set(_runtimes libtsan.so)
endif()
foreach(_lib IN LISTS _runtimes)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${_lib}
                  OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE)
  get_filename_component(_path "${_path}" REALPATH)
  list(APPEND _preload ${_path})
endforeach()
if(_preload)
  string(REPLACE ";" ":" ERAID_NBDKIT_PRELOAD "${_preload}")
endif()

# eraid_library(NAME SOURCES... DEPS ...): one library per folder, linked downward.
function(eraid_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${name} PRIVATE ${ERAID_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# eraid_test(NAME SOURCES... DEPS ... [LABELS ...]): a GoogleTest binary registered in CTest.
function(eraid_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${ERAID_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT 600
                                  ENVIRONMENT "ERAID_NBDKIT_PRELOAD=${ERAID_NBDKIT_PRELOAD}")
endfunction()
