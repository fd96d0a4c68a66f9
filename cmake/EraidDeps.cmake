# Locates the system libraries eraid builds on (all from Debian packages; see
# tools/install-deps.sh) and wraps each in an imported target.
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
# Drives on other hosts (compress/nbd_backend.h), and the end-to-end tests' client.
pkg_check_modules(LIBNBD REQUIRED IMPORTED_TARGET libnbd)

find_path(ISAL_INCLUDE_DIR isa-l/crc.h REQUIRED)
find_library(ISAL_LIBRARY isal REQUIRED)
add_library(eraid::isal UNKNOWN IMPORTED)
set_target_properties(eraid::isal PROPERTIES
  IMPORTED_LOCATION ${ISAL_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${ISAL_INCLUDE_DIR})

find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
if(ERAID_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
# The tools' JSON (tools/json.h): header-only.
find_package(nlohmann_json 3.10 REQUIRED)
