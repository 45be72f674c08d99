# PagodaPluginSDK.cmake: pagoda_add_plugin() for plugins built out of tree
# against the installed SDK (included by PagodaConfig.cmake, which sets
# Pagoda::sdk and PAGODA_PLUGIN_DIR). The in-tree build has its own
# version in PagodaPlugin.cmake; both make the same kind of file.
#
# pagoda_add_plugin(<kind> <name> SOURCES src... [LIBS lib...] [DESTINATION dir])
#   Builds the MODULE library <kind>-<name>.so into
#   ${PAGODA_PLUGIN_OUTPUT_DIR} (default: the top of the build tree, so
#   PAGODA_PLUGIN_PATH=<build dir> finds it), with hidden visibility (only
#   pagoda_plugin_entry, marked by PAGODA_PLUGIN(), is exported) and
#   position-independent code, and installs it to DESTINATION (default:
#   PAGODA_PLUGIN_INSTALL_DIR, itself defaulting to the SDK's plugin folder).
#   The target is named pagoda_<kind>_<name>. kind: backend, scheduler,
#   kvcache or frontend; name: what the INI names ([engine] backend = <name>).
#
# pagoda_add_conformance_test(<name> [ARGS ...])
#   Adds a ctest that runs the installed pagoda-conformance on the backend
#   <name> built here (--backend <name> --plugin <its .so>).
if(NOT DEFINED PAGODA_PLUGIN_OUTPUT_DIR)
  set(PAGODA_PLUGIN_OUTPUT_DIR ${CMAKE_BINARY_DIR})
endif()
set(PAGODA_PLUGIN_INSTALL_DIR "${PAGODA_PLUGIN_DIR}" CACHE PATH
    "Where pagoda_add_plugin() installs plugins (default: the SDK's plugin folder)")

function(pagoda_add_plugin kind name)
  cmake_parse_arguments(P "" "DESTINATION" "SOURCES;LIBS" ${ARGN})
  if(NOT kind MATCHES "^(backend|scheduler|kvcache|frontend)$")
    message(FATAL_ERROR "pagoda_add_plugin: kind '${kind}' is not one of backend, scheduler, kvcache, frontend")
  endif()
  if(NOT name MATCHES "^[A-Za-z0-9_.]+$")
    message(FATAL_ERROR "pagoda_add_plugin: name '${name}' may hold only letters, digits, '_' and '.'")
  endif()
  if(NOT P_SOURCES)
    message(FATAL_ERROR "pagoda_add_plugin(${kind} ${name}): no SOURCES")
  endif()
  if(NOT P_DESTINATION)
    set(P_DESTINATION "${PAGODA_PLUGIN_INSTALL_DIR}")
  endif()
  set(target pagoda_${kind}_${name})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE Pagoda::sdk ${P_LIBS})
  set_target_properties(${target} PROPERTIES
    PREFIX "" SUFFIX ".so" OUTPUT_NAME "${kind}-${name}"
    POSITION_INDEPENDENT_CODE ON
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY "${PAGODA_PLUGIN_OUTPUT_DIR}")
  # Unresolved symbols are a load-time refusal in pagoda; find them at link time.
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION "${P_DESTINATION}")
endfunction()

function(pagoda_add_conformance_test name)
  cmake_parse_arguments(P "" "" "ARGS" ${ARGN})
  add_test(NAME conformance_${name}
    COMMAND ${PAGODA_CONFORMANCE_EXECUTABLE} --backend ${name}
            --plugin $<TARGET_FILE:pagoda_backend_${name}> ${P_ARGS})
endfunction()
