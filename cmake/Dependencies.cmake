# liburing, jemalloc, jansson and Check come from pkg-config. They are linked from
# their static archives: the binaries must run on the GPU machine, which has
# none of the three installed (see ../shared/MEASURED.md).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

# lease_static_pkg(<target> <pkg-config module> <archive name>...)
# Creates IMPORTED target <target>: include dirs from pkg-config, the first
# archive found among the names as the library, plus the module's other
# --static link flags.
function(lease_static_pkg target module)
  string(MAKE_C_IDENTIFIER "${module}" prefix)
  pkg_check_modules(${prefix} REQUIRED ${module})
  find_library(${prefix}_ARCHIVE NAMES ${ARGN}
               HINTS ${${prefix}_LIBRARY_DIRS} ${${prefix}_STATIC_LIBRARY_DIRS}
               NO_CACHE)
  if(NOT ${prefix}_ARCHIVE)
    message(FATAL_ERROR "${module}: expected a static archive (${ARGN}) next to "
            "the pkg-config module, found none. On Debian install the -dev package "
            "(make deps does this).")
  endif()
  add_library(${target} STATIC IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${${prefix}_ARCHIVE}"
    INTERFACE_INCLUDE_DIRECTORIES "${${prefix}_INCLUDE_DIRS}")
  message(STATUS "${module} ${${prefix}_VERSION}: static ${${prefix}_ARCHIVE}")
endfunction()

lease_static_pkg(lease::uring liburing liburing.a)
lease_static_pkg(lease::jemalloc jemalloc libjemalloc_pic.a libjemalloc.a)
# jansson: the JSON of stagingd's control replies and of leasectl --json.
lease_static_pkg(lease::jansson jansson libjansson.a)
set_property(TARGET lease::jemalloc APPEND PROPERTY
             INTERFACE_LINK_LIBRARIES Threads::Threads m dl)

# Check needs libsubunit; both are archives so test binaries travel too.
lease_static_pkg(lease::subunit libsubunit libsubunit.a)
lease_static_pkg(lease::check check libcheck_pic.a libcheck.a)
set_property(TARGET lease::check APPEND PROPERTY
             INTERFACE_LINK_LIBRARIES lease::subunit Threads::Threads rt m)

# CUDA is optional: without the toolkit everything CUDA-free still builds
# and the summary at the end of configure says what was skipped.
include(CudaDriver)
if(NOT LEASE_HAVE_CUDA)
  message(STATUS "CUDA toolkit not used: ${LEASE_CUDA_WHY}")
endif()
