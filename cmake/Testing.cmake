# lease_add_check_test(<name> SOURCES <src>... [LIBS <lib>...] [GPU]
#                      [FAKECUDA_ENV <var=value>...] [LABELS <label>...]
#                      [TIMEOUT <seconds>] [ARGS <arg>...])
#
# One Check suite per executable. A GPU test is labelled `gpu` and run through
# gpu_gate, which exits 77 (reported by ctest as skipped, never passed) where
# there is no driver or no device. Every test may itself exit 77 to skip.
# A GPU test is also registered as <name>_fakecuda (lease_add_fakecuda_test),
# with FAKECUDA_ENV added to its environment.
function(lease_add_check_test name)
  cmake_parse_arguments(T "GPU" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS;FAKECUDA_ENV" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE lease_build_flags lease::check ${T_LIBS})
  # Small header-only helpers shared by suites (tests/*.h), and the agent's
  # log marks (gpu/server_marks.h, no dependencies), which the suites that
  # start agents look for in their logs.
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}/tests"
                                             "${PROJECT_SOURCE_DIR}/gpu/server/include")
  set(labels ${T_LABELS})
  if(T_GPU)
    list(APPEND labels gpu)
    add_test(NAME ${name} COMMAND gpu_gate $<TARGET_FILE:${name}> ${T_ARGS})
  else()
    list(APPEND labels cpu)
    add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "${labels}"
                       TIMEOUT ${T_TIMEOUT})
  if(T_GPU)
    lease_add_fakecuda_test(${name} $<TARGET_FILE:${name}> ${T_ARGS})
    if(T_FAKECUDA_ENV AND TEST ${name}_fakecuda)
      set_property(TEST ${name}_fakecuda APPEND PROPERTY ENVIRONMENT ${T_FAKECUDA_ENV})
    endif()
  endif()
endfunction()

# lease_add_fakecuda_test(<gpu test> <command>...)
#
# Registers <gpu test>_fakecuda: <command> (the GPU test's binary and
# arguments, without gpu_gate) with the fake driver of tests/fakecuda first
# on LD_LIBRARY_PATH, so the binary and every process it starts (lease-agent)
# load it instead of libcuda.so.1, and FAKECUDA=1, FAKECUDA_ARCH=
# LEASE_GPU_ARCH. It is a CPU test (labels fakecuda, cpu and the GPU test's
# others, never gpu): the real GPU test stays skipped here. It needs the
# fixture fakecuda_ready, so a missing fake fails instead of skipping. Its
# timeout, resource locks and pass/fail expressions follow the GPU test's,
# read at the end of the directory so that properties set after this call
# are copied too. A test that cannot pass under the fake for a reason of the
# fake's may exit 77 when FAKECUDA=1, with a comment why (none does today).
option(LEASE_FAKECUDA_TESTS "Also run every GPU test on the CPU against tests/fakecuda" ON)
function(lease_add_fakecuda_test name)
  if(NOT LEASE_HAVE_CUDA OR NOT LEASE_FAKECUDA_TESTS)
    return()
  endif()
  add_test(NAME ${name}_fakecuda COMMAND ${ARGN})
  # Check's per-test timeouts were chosen for a GPU; the fake is far slower.
  set_tests_properties(${name}_fakecuda PROPERTIES
    ENVIRONMENT "FAKECUDA=1;FAKECUDA_ARCH=${LEASE_GPU_ARCH};CK_TIMEOUT_MULTIPLIER=4"
    ENVIRONMENT_MODIFICATION "LD_LIBRARY_PATH=path_list_prepend:$<TARGET_FILE_DIR:fakecuda>"
    SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fakecuda)
  cmake_language(EVAL CODE "cmake_language(DEFER CALL lease__fakecuda_follow [[${name}]])")
endfunction()

function(lease__fakecuda_follow name)
  get_test_property(${name} LABELS labels)
  list(REMOVE_ITEM labels gpu cpu NOTFOUND)
  set(labels fakecuda cpu ${labels})
  set_tests_properties(${name}_fakecuda PROPERTIES LABELS "${labels}")
  foreach(p TIMEOUT RESOURCE_LOCK PASS_REGULAR_EXPRESSION FAIL_REGULAR_EXPRESSION)
    get_test_property(${name} ${p} v)
    if(v)
      set_tests_properties(${name}_fakecuda PROPERTIES ${p} "${v}")
    endif()
  endforeach()
endfunction()

# ---- fuzzing (tests/fuzz/, `make fuzz`) --------------------------------
#
# LEASE_FUZZ=ON (a build folder of its own, configured with clang) builds
# the libFuzzer binaries fuzz_* of tests/fuzz/ and tools/linkcheck's
# fuzz_elf. Every project target is then compiled with libFuzzer's coverage
# instrumentation and ASan+UBSan, so the code under test, not only the
# harness, guides the fuzzer; the binaries link -fsanitize=fuzzer.
option(LEASE_FUZZ "Build the libFuzzer harnesses (needs CMAKE_C_COMPILER=clang)" OFF)
if(LEASE_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LEASE_FUZZ=ON: expected CMAKE_C_COMPILER=clang (libFuzzer), "
            "found ${CMAKE_C_COMPILER_ID} at ${CMAKE_C_COMPILER}. "
            "Configure a separate build folder with -DCMAKE_C_COMPILER=clang.")
  endif()
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
  check_c_source_compiles(
    "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }"
    LEASE_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  if(NOT LEASE_HAVE_LIBFUZZER)
    message(FATAL_ERROR "LEASE_FUZZ=ON: ${CMAKE_C_COMPILER} cannot link -fsanitize=fuzzer "
            "(Debian: the clang package brings libclang_rt.fuzzer)")
  endif()
  target_compile_options(lease_build_flags INTERFACE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer)
  target_link_options(lease_build_flags INTERFACE -fsanitize=address,undefined)
endif()
