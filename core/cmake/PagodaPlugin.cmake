# pagoda_add_plugin(<kind> <name> SOURCES ... [LIBS ...])
# Builds one plugin as a MODULE library named <kind>-<name>.so in the build
# tree's plugin folder, with hidden visibility (only pagoda_plugin_entry is
# exported), and installs it to the plugin directory.
function(pagoda_add_plugin kind name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  set(target pagoda_${kind}_${name})
  add_library(${target} MODULE ${P_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${target} PRIVATE ${P_LIBS})
  set_target_properties(${target} PROPERTIES
    PREFIX "" OUTPUT_NAME "${kind}-${name}"
    C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${PAGODA_PLUGIN_BUILD_DIR})
  install(TARGETS ${target} LIBRARY DESTINATION ${PAGODA_PLUGIN_INSTALL_DIR})
endfunction()

# SIMD flags by file name: foo_avx2.c, foo_avx512.c are compiled for that ISA
# and only called after a run-time CPUID check.
function(pagoda_simd_flags)
  foreach(src ${ARGN})
    if(src MATCHES "_avx512\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;-mavx512fp16;-mavx2;-mfma;-mf16c")
    elseif(src MATCHES "_amx\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mamx-tile;-mamx-int8;-mamx-bf16;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c")
    elseif(src MATCHES "_avx2\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    endif()
  endforeach()
endfunction()
