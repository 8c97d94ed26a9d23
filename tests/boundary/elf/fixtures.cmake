# ELF fixtures for layer 3: programs and libraries that reach CUDA in a way
# linkcheck's default run missed before issue #11. test_boundary_linkcheck
# runs the real linkcheck on each (tests/boundary/test_boundary_linkcheck.c).
set(BD_ELF "${CMAKE_CURRENT_BINARY_DIR}/elf")
set(BD_ELF_SRC "${CMAKE_CURRENT_SOURCE_DIR}/elf")
set(BD_ELF_TARGETS "")

# bd_elf(<target> EXE|SHARED <dir> SOURCES <src>... [OUTPUT <name>] [SUFFIX <s>|NONE]
#        [SONAME <name>] [NEEDS <target>:<dir>:<file>...] [LINK <lib>...]
#        [RUNPATH <path>] [OPTIONS <link option>...] [DEFINES <def>...])
# NEEDS are linked as -L<dir> -l:<file>, so CMake adds no search path of its
# own: RUNPATH is the only DT_RUNPATH ($ORIGIN and $PLATFORM stay literal).
function(bd_elf target kind dir)
  cmake_parse_arguments(F "" "OUTPUT;SUFFIX;SONAME;RUNPATH" "SOURCES;NEEDS;LINK;OPTIONS;DEFINES"
                        ${ARGN})
  if(kind STREQUAL "EXE")
    add_executable(${target} ${F_SOURCES})
  else()
    add_library(${target} ${kind} ${F_SOURCES})
  endif()
  target_link_libraries(${target} PRIVATE lease_build_flags ${F_LINK})
  foreach(need IN LISTS F_NEEDS)
    string(REPLACE ":" ";" parts "${need}")
    list(GET parts 0 need_target)
    list(GET parts 1 need_dir)
    list(GET parts 2 need_file)
    add_dependencies(${target} ${need_target})
    target_link_libraries(${target} PRIVATE "-L${BD_ELF}/${need_dir}" "-l:${need_file}")
  endforeach()
  target_compile_definitions(${target} PRIVATE ${F_DEFINES})
  set_target_properties(${target} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY "${BD_ELF}/${dir}" LIBRARY_OUTPUT_DIRECTORY "${BD_ELF}/${dir}")
  if(F_OUTPUT)
    set_target_properties(${target} PROPERTIES OUTPUT_NAME "${F_OUTPUT}")
  endif()
  if(F_SUFFIX STREQUAL "NONE")
    set_target_properties(${target} PROPERTIES SUFFIX "")
  elseif(F_SUFFIX)
    set_target_properties(${target} PROPERTIES SUFFIX "${F_SUFFIX}")
  endif()
  if(F_SONAME)
    set_target_properties(${target} PROPERTIES NO_SONAME ON)
    target_link_options(${target} PRIVATE "LINKER:-soname,${F_SONAME}")
  endif()
  target_link_options(${target} PRIVATE "LINKER:--no-as-needed" ${F_OPTIONS})
  if(F_RUNPATH)
    set_target_properties(${target} PROPERTIES BUILD_RPATH "${F_RUNPATH}")
    target_link_options(${target} PRIVATE "LINKER:--enable-new-dtags")
  else()
    set_target_properties(${target} PROPERTIES SKIP_BUILD_RPATH ON)
  endif()
  set(BD_ELF_TARGETS ${BD_ELF_TARGETS} ${target} PARENT_SCOPE)
endfunction()

# The family under its own names.
bd_elf(bd_fam_cublas SHARED fam SOURCES ${BD_ELF_SRC}/family_lib.c OUTPUT cublas
  SUFFIX ".so.13" SONAME libcublas.so.13)
bd_elf(bd_fam_driver SHARED fam SOURCES ${BD_ELF_SRC}/family_lib.c OUTPUT cuda
  SUFFIX ".so.1" SONAME libcuda.so.1)
bd_elf(bd_family EXE bin SOURCES ${BD_ELF_SRC}/family_user.c
  OUTPUT family NEEDS bd_fam_cublas:fam:libcublas.so.13 RUNPATH "$ORIGIN/../fam")

# A renamed file: linked against a stub libfoo.so, found at run time as a
# libfoo.so whose SONAME is libcufft.so.12.
bd_elf(bd_foo_stub SHARED stub SOURCES ${BD_ELF_SRC}/family_lib.c OUTPUT foo)
bd_elf(bd_foo_renamed SHARED renamed SOURCES ${BD_ELF_SRC}/family_lib.c OUTPUT foo
  SONAME libcufft.so.12)
bd_elf(bd_renamed EXE bin SOURCES ${BD_ELF_SRC}/family_user.c
  OUTPUT renamed NEEDS bd_foo_stub:stub:libfoo.so RUNPATH "$ORIGIN/../renamed")
add_dependencies(bd_renamed bd_foo_renamed)

# A dependency named without .so: DT_NEEDED "libcuda".
bd_elf(bd_noso_lib SHARED noso SOURCES ${BD_ELF_SRC}/family_lib.c OUTPUT cuda SUFFIX NONE
  SONAME libcuda)
bd_elf(bd_noso EXE bin SOURCES ${BD_ELF_SRC}/family_user.c
  OUTPUT noso NEEDS bd_noso_lib:noso:libcuda RUNPATH "$ORIGIN/../noso")

# Dependencies that reach the driver from inside: a dlopen() name, a
# defined entry point.
bd_elf(bd_helper_lib SHARED helper SOURCES ${BD_ELF_SRC}/helper_dlopen.c OUTPUT helper
  LINK ${CMAKE_DL_LIBS})
bd_elf(bd_helper_dep EXE bin SOURCES ${BD_ELF_SRC}/helper_user.c
  OUTPUT helper_dep NEEDS bd_helper_lib:helper:libhelper.so RUNPATH "$ORIGIN/../helper")
bd_elf(bd_shim_lib SHARED shim SOURCES ${BD_ELF_SRC}/shim.c OUTPUT shim)
bd_elf(bd_shim_dep EXE bin SOURCES ${BD_ELF_SRC}/helper_user.c
  OUTPUT shim_dep NEEDS bd_shim_lib:shim:libshim.so RUNPATH "$ORIGIN/../shim")

# libprec.so, good and bad, copied into the folders glibc searches only on
# some CPUs: glibc-hwcaps, the legacy tls/ and x86_64/, $PLATFORM.
bd_elf(bd_prec_good SHARED prec/good SOURCES ${BD_ELF_SRC}/prec.c OUTPUT prec)
bd_elf(bd_prec_bad SHARED prec/bad SOURCES ${BD_ELF_SRC}/prec.c OUTPUT prec
  DEFINES BD_PREC_BAD NEEDS bd_fam_driver:fam:libcuda.so.1)
set(good "${BD_ELF}/prec/good/libprec.so")
set(bad "${BD_ELF}/prec/bad/libprec.so")
set(copies "")
foreach(pair IN ITEMS "hw=${good}" "hw/glibc-hwcaps/x86-64-v4=${good}"
                      "hw/glibc-hwcaps/x86-64-v3=${bad}" "tlsd=${good}" "tlsd/tls=${bad}"
                      "x86d=${good}" "x86d/x86_64=${bad}" "plat/x86_64=${good}"
                      "plat/haswell=${bad}")
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 to)
  list(GET pair 1 from)
  list(APPEND copies COMMAND ${CMAKE_COMMAND} -E make_directory "${BD_ELF}/${to}"
                     COMMAND ${CMAKE_COMMAND} -E copy "${from}" "${BD_ELF}/${to}/libprec.so")
endforeach()
add_custom_target(bd_prec_layout ALL ${copies} DEPENDS bd_prec_good bd_prec_bad VERBATIM)
add_dependencies(bd_prec_layout bd_prec_good bd_prec_bad)
foreach(case IN ITEMS "hwcaps=hw" "tls=tlsd" "legacy=x86d" "platform=plat/$PLATFORM")
  string(REPLACE "=" ";" pair "${case}")
  list(GET pair 0 name)
  list(GET pair 1 dir)
  bd_elf(bd_${name} EXE bin SOURCES ${BD_ELF_SRC}/prec_user.c
    OUTPUT ${name} NEEDS bd_prec_good:prec/good:libprec.so RUNPATH "$ORIGIN/../${dir}")
  add_dependencies(bd_${name} bd_prec_layout)
endforeach()

# Names where the old scan of data sections did not look.
bd_elf(bd_dynstr SHARED lib SOURCES ${BD_ELF_SRC}/dynstr_symbol.c OUTPUT dynstr)
bd_elf(bd_audit EXE bin SOURCES ${BD_ELF_SRC}/audit_user.c OUTPUT audit OPTIONS "LINKER:--audit=libcuda.so.1")
bd_elf(bd_depaudit SHARED lib SOURCES ${BD_ELF_SRC}/family_lib.c OUTPUT depaudit
  OPTIONS "LINKER:--depaudit=libnvidia-ml.so.1")
bd_elf(bd_note EXE bin SOURCES ${BD_ELF_SRC}/note_name.c OUTPUT note)
bd_elf(bd_text EXE bin SOURCES ${BD_ELF_SRC}/text_name.c OUTPUT text)
bd_elf(bd_utf16 EXE bin SOURCES ${BD_ELF_SRC}/wide_name.c OUTPUT utf16 DEFINES BD_WIDE=16)
bd_elf(bd_utf32 EXE bin SOURCES ${BD_ELF_SRC}/wide_name.c OUTPUT utf32 DEFINES BD_WIDE=32)
bd_elf(bd_utf16be EXE bin SOURCES ${BD_ELF_SRC}/wide_name.c OUTPUT utf16be DEFINES BD_WIDE=61)

# The loader as a way in: a dlsym() of a driver entry point, and dlopen() /
# dlmopen() of a name built at run time, dynamic and static.
bd_elf(bd_dlsym EXE bin SOURCES ${BD_ELF_SRC}/dlsym_name.c OUTPUT dlsym LINK ${CMAKE_DL_LIBS})
bd_elf(bd_dlopen_built EXE bin SOURCES ${BD_ELF_SRC}/dlopen_built.c OUTPUT dlopen_built LINK ${CMAKE_DL_LIBS})
bd_elf(bd_dlmopen_built EXE bin SOURCES ${BD_ELF_SRC}/dlopen_built.c OUTPUT dlmopen_built LINK ${CMAKE_DL_LIBS}
  DEFINES BD_DLMOPEN)
if(NOT LEASE_SANITIZE AND EXISTS /usr/lib/x86_64-linux-gnu/libc.a)
  bd_elf(bd_static_dlopen EXE bin SOURCES ${BD_ELF_SRC}/dlopen_built.c OUTPUT static_dlopen
    OPTIONS -static)
  set(BD_HAVE_STATIC 1)
else()
  set(BD_HAVE_STATIC 0)
endif()

lease_add_check_test(test_boundary_linkcheck
  SOURCES test_boundary_linkcheck.c ${PROJECT_SOURCE_DIR}/tests/linkcheck/lc_test_util.c
  LABELS boundary)
target_include_directories(test_boundary_linkcheck PRIVATE "${PROJECT_SOURCE_DIR}/tests/linkcheck")
target_compile_definitions(test_boundary_linkcheck PRIVATE
  LC_TEST_LINKCHECK="$<TARGET_FILE:linkcheck>"
  BD_ELF="${BD_ELF}"
  BD_IMPORTS="${PROJECT_SOURCE_DIR}/cmake/stagingd.imports"
  BD_HAVE_STATIC=${BD_HAVE_STATIC})
add_dependencies(test_boundary_linkcheck linkcheck ${BD_ELF_TARGETS} bd_prec_layout)
