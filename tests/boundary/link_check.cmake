# Configures tests/boundary/link once, then links each case: the control must
# link with linkguard's OK; every other case must be refused at link time
# with the culprit and how it got onto the link line named, and leave no
# output behind.
# -DCMAKE_CMD -DCC -DFIXTURE -DWORK -DLEASE_SOURCE_DIR -DLINKGUARD -DLINKCHECK
# -DFAKE_DRIVER=<fake libcuda.so.1> -DARCHIVE=<libinnocent.a>
file(REMOVE_RECURSE "${WORK}")
set(inputs "${WORK}/inputs")
file(MAKE_DIRECTORY "${inputs}")
file(WRITE "${inputs}/libsneak.so" "INPUT(${FAKE_DRIVER})\n")
file(WRITE "${inputs}/link.rsp" "${FAKE_DRIVER}\n")
file(COPY_FILE "${FAKE_DRIVER}" "${inputs}/libstore.so")

execute_process(
  COMMAND "${CMAKE_CMD}" -S "${FIXTURE}" -B "${WORK}/build" -DCMAKE_C_COMPILER=${CC}
          -DLEASE_SOURCE_DIR=${LEASE_SOURCE_DIR} -DLEASE_LINKGUARD=${LINKGUARD}
          -DLEASE_LINKCHECK=${LINKCHECK} -DINPUTS=${inputs} -DARCHIVE=${ARCHIVE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the link fixture did not configure (every case must pass the walk):\n${out}${err}")
endif()

set(fail "linkguard: FAIL [a-z]+: CUDA boundary violated at link time: the link of [^ ]+ reads ")
foreach(case_expect IN ITEMS
    "plain=linkguard: OK plain: none of the [0-9]+ files the linker read is CUDA"
    "script=${fail}${FAKE_DRIVER}: its file name is a forbidden library .stem 'libcuda'.; pulled in by the linker script ${inputs}/libsneak.so"
    "rsp=${fail}${FAKE_DRIVER}: its file name is a forbidden library .stem 'libcuda'.; named in a response file"
    "renamed=${fail}${inputs}/libstore.so: its SONAME libcuda.so.1 is a forbidden library .stem 'libcuda'.; found for '-lstore' on the link line"
    "stripped=${fail}${ARCHIVE}: its member [^:]*cuinit_member[^:]*: it defines the CUDA symbol cuInit")
  string(FIND "${case_expect}" "=" eq)
  string(SUBSTRING "${case_expect}" 0 ${eq} case)
  math(EXPR from "${eq} + 1")
  string(SUBSTRING "${case_expect}" ${from} -1 expect)
  execute_process(COMMAND "${CMAKE_CMD}" --build "${WORK}/build" --target ${case}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  if(case STREQUAL "plain")
    if(NOT rc EQUAL 0 OR NOT all MATCHES "${expect}")
      message(FATAL_ERROR "case plain: expected a clean, traced link:\n${all}")
    endif()
  else()
    if(rc EQUAL 0)
      message(FATAL_ERROR "case ${case}: the link was not refused:\n${all}")
    endif()
    if(NOT all MATCHES "${expect}")
      message(FATAL_ERROR "case ${case}: refused, but the report lacks '${expect}':\n${all}")
    endif()
    if(EXISTS "${WORK}/build/${case}")
      message(FATAL_ERROR "case ${case}: the refused output ${WORK}/build/${case} was left behind")
    endif()
  endif()
  message(STATUS "case ${case}: as expected")
endforeach()
file(REMOVE_RECURSE "${WORK}")
