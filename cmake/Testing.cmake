# lease_add_check_test(<name> SOURCES <src>... [LIBS <lib>...] [GPU]
#                      [LABELS <label>...] [TIMEOUT <seconds>] [ARGS <arg>...])
#
# One Check suite per executable. A GPU test is labelled `gpu` and run through
# gpu_gate, which exits 77 (reported by ctest as skipped, never passed) where
# there is no driver or no device. Every test may itself exit 77 to skip.
function(lease_add_check_test name)
  cmake_parse_arguments(T "GPU" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE lease_build_flags lease::check ${T_LIBS})
  # Small header-only helpers shared by suites (tests/*.h).
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}/tests")
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
endfunction()
