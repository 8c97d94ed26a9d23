# Runs the fixture project for one CASE and checks the outcome.
# -DCMAKE_CMD=<cmake> -DFIXTURE=<dir> -DWORK=<dir> -DLEASE_SOURCE_DIR=<dir>
# -DCASE=<name> -DEXPECT=<regex or "clean"> [-DREFUSAL=<regex the error must match>]
# [-DFAKE_DRIVER=<fake libcuda.so.1>]
if(NOT REFUSAL)
  set(REFUSAL "CUDA boundary violated at configure time")
endif()
file(REMOVE_RECURSE "${WORK}")
execute_process(
  COMMAND "${CMAKE_CMD}" -S "${FIXTURE}" -B "${WORK}" -DCASE=${CASE}
          -DLEASE_SOURCE_DIR=${LEASE_SOURCE_DIR} -DFAKE_DRIVER=${FAKE_DRIVER}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE_RECURSE "${WORK}")
if(EXPECT STREQUAL "clean")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "case ${CASE}: a clean closure was refused:\n${err}")
  endif()
  if(NOT out MATCHES "CUDA boundary: daemon link closure is CUDA-free")
    message(FATAL_ERROR "case ${CASE}: the walk did not report its result:\n${out}")
  endif()
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "case ${CASE}: layer 2 did not fire; configure succeeded:\n${out}")
endif()
# CMake wraps a message's long lines; match the report as one line too.
string(REGEX REPLACE "\n +" " " flat "${err}")
if(NOT err MATCHES "${REFUSAL}" AND NOT flat MATCHES "${REFUSAL}")
  message(FATAL_ERROR "case ${CASE}: configure failed for another reason:\n${err}")
endif()
if(NOT err MATCHES "${EXPECT}" AND NOT flat MATCHES "${EXPECT}")
  message(FATAL_ERROR "case ${CASE}: the report lacks the path '${EXPECT}':\n${err}")
endif()
message(STATUS "case ${CASE}: refused as expected")
