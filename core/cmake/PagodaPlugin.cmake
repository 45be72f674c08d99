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
  # every plugin of this tree, for targets that need them all (pagoda_tsan_tests)
  set_property(GLOBAL APPEND PROPERTY PAGODA_PLUGIN_TARGETS ${target})
endfunction()

# SIMD flags by file name: foo_avx512.c gets AVX-512 F/BW/VL/DQ + VNNI +
# BF16, foo_avxvnni.c AVX-VNNI, foo_amx.c the AMX tiles (+ AVX-512), foo_avx2.c
# AVX2 + FMA + F16C; each is called only after a run-time CPUID check.
set(PAGODA_FLAGS_AVX2 "-mavx2;-mfma;-mf16c")
set(PAGODA_FLAGS_AVX512 "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;${PAGODA_FLAGS_AVX2}")
set(PAGODA_FLAGS_AVXVNNI "-mavxvnni;${PAGODA_FLAGS_AVX2}")
set(PAGODA_FLAGS_AMX "-mamx-tile;-mamx-int8;-mamx-bf16;${PAGODA_FLAGS_AVX512}")
function(pagoda_simd_flags)
  foreach(src ${ARGN})
    # by file name, never by folder: a folder also holds drivers that run on
    # every host (kernels/avx512/matmul_bf16.c, kernels/amx/amx_detect.c)
    # and the SIMDe second compiles (*_simde_avx2.c), which must not get
    # a faster level's flags (SIGILL on a CPU without it)
    if(src MATCHES "_avx512\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${PAGODA_FLAGS_AVX512}")
    elseif(src MATCHES "_avxvnni\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${PAGODA_FLAGS_AVXVNNI}")
    elseif(src MATCHES "_amx\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${PAGODA_FLAGS_AMX}")
    elseif(src MATCHES "_avx2\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${PAGODA_FLAGS_AVX2}")
    endif()
  endforeach()
endfunction()
