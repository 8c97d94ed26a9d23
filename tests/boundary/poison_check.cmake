# Compiles a file with stagingd's include path (poison first) and the real
# CUDA include dir after it. Expects: plain.c compiles; includes_cuda.c fails
# with the poison header's message.
# -DCC=<compiler> -DINCLUDES=<dir|dir|...> -DCUDA_INCLUDE=<dir or empty> -DSRC=<dir>
string(REPLACE "|" ";" dirs "${INCLUDES}")
set(flags "")
foreach(d IN LISTS dirs)
  list(APPEND flags "-I${d}")
endforeach()
if(CUDA_INCLUDE)
  list(APPEND flags "-I${CUDA_INCLUDE}")
endif()

execute_process(COMMAND ${CC} -fsyntax-only ${flags} "${SRC}/plain.c"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "control failed: plain.c should compile with stagingd's flags:\n${out}")
endif()

execute_process(COMMAND ${CC} -fsyntax-only ${flags} "${SRC}/includes_cuda.c"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "layer 1 did not fire: a file including <cuda.h> compiled with stagingd's flags")
endif()
if(NOT out MATCHES "stagingd is CUDA-free: it may not include <cuda.h>")
  message(FATAL_ERROR "includes_cuda.c failed, but not through the poison header:\n${out}")
endif()
message(STATUS "layer 1 fired as expected:\n${out}")
