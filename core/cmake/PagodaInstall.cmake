# PagodaInstall.cmake: what `cmake --install` adds beside the binary and the
# in-tree plugins (which install themselves): the public headers, the CMake
# package (find_package(Pagoda) with its own pagoda_add_plugin), the
# pkg-config file pagoda-plugin.pc, and the bundled model and golden tokens
# the conformance runner checks a backend against.
# Not for: building anything (core/, backends/, plugins/, tests/ do that).
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/pagoda DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

set(PAGODA_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Pagoda)
set(PAGODA_DATA_INSTALL_DIR ${CMAKE_INSTALL_DATADIR}/pagoda)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/PagodaConfig.cmake.in
  ${CMAKE_BINARY_DIR}/sdk/PagodaConfig.cmake
  INSTALL_DESTINATION ${PAGODA_CMAKE_PACKAGE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR PAGODA_PLUGIN_INSTALL_DIR
            PAGODA_DATA_INSTALL_DIR)
# The package version is the ABI's: a plugin built against 1.x loads in any
# pagoda whose ABI major is 1 and minor is at least the plugin's.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/pagoda/plugin.h abi_lines
     REGEX "^#define PAGODA_ABI_(MAJOR|MINOR) [0-9]+")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*" "\\1" PAGODA_ABI_MAJOR "${abi_lines}")
string(REGEX REPLACE ".*MINOR ([0-9]+).*" "\\1" PAGODA_ABI_MINOR "${abi_lines}")
write_basic_package_version_file(${CMAKE_BINARY_DIR}/sdk/PagodaConfigVersion.cmake
  VERSION ${PAGODA_ABI_MAJOR}.${PAGODA_ABI_MINOR} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/sdk/PagodaConfig.cmake ${CMAKE_BINARY_DIR}/sdk/PagodaConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/PagodaPluginSDK.cmake
        DESTINATION ${PAGODA_CMAKE_PACKAGE_DIR})

# pkg-config: prefix relative to the .pc file itself, so the installed tree
# can be moved (or installed with --prefix other than the configured one).
set(PAGODA_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH PAGODA_PC_TO_PREFIX /r/${PAGODA_PKGCONFIG_DIR} /r)
string(REGEX REPLACE "/$" "" PAGODA_PC_TO_PREFIX "${PAGODA_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/pagoda-plugin.pc.in ${CMAKE_BINARY_DIR}/sdk/pagoda-plugin.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/sdk/pagoda-plugin.pc DESTINATION ${PAGODA_PKGCONFIG_DIR})

install(FILES ${PROJECT_SOURCE_DIR}/models/stories260K.gguf DESTINATION ${PAGODA_DATA_INSTALL_DIR}/models)
install(FILES ${PROJECT_SOURCE_DIR}/tests/data/stories260K.golden.json DESTINATION ${PAGODA_DATA_INSTALL_DIR})
