# The staging pool (docs/staging-pool.md): sealed memfd segments carved by one
# jemalloc arena per memory class through jemalloc's extent hooks.
target_sources(stagingd_core PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/pool.c"
  "${CMAKE_CURRENT_LIST_DIR}/segment.c"
  "${CMAKE_CURRENT_LIST_DIR}/arena.c")

# Debian's jemalloc is unprefixed: its archive defines malloc and free next
# to mallocx and mallctl, so linking it into an executable replaces the
# process allocator. Under AddressSanitizer that would shadow ASan's malloc
# interceptors (memory from one allocator freed by the other). The sanitizer
# build therefore links the shared libjemalloc.so.2: the executable defines
# no malloc, libasan comes first in symbol lookup and keeps malloc/free,
# while mallocx/dallocx/mallctl (which ASan does not define) still resolve to
# jemalloc. Release builds keep the static archive so the binary travels to
# the GPU machine, which has no jemalloc installed.
if(LEASE_SANITIZE)
  get_target_property(_sd_jemalloc_dirs lease::jemalloc INTERFACE_INCLUDE_DIRECTORIES)
  find_library(STAGINGD_JEMALLOC_SHARED NAMES libjemalloc.so.2 libjemalloc.so)
  if(NOT STAGINGD_JEMALLOC_SHARED)
    message(FATAL_ERROR "LEASE_SANITIZE: expected the shared libjemalloc.so.2 (Debian package "
            "libjemalloc2) so ASan keeps malloc, found none")
  endif()
  add_library(stagingd::jemalloc SHARED IMPORTED GLOBAL)
  set_target_properties(stagingd::jemalloc PROPERTIES IMPORTED_LOCATION "${STAGINGD_JEMALLOC_SHARED}")
  if(_sd_jemalloc_dirs)
    set_target_properties(stagingd::jemalloc PROPERTIES
                          INTERFACE_INCLUDE_DIRECTORIES "${_sd_jemalloc_dirs}")
  endif()
  message(STATUS "staging pool: sanitizer build links shared ${STAGINGD_JEMALLOC_SHARED}")
else()
  add_library(stagingd::jemalloc INTERFACE IMPORTED GLOBAL)
  set_target_properties(stagingd::jemalloc PROPERTIES INTERFACE_LINK_LIBRARIES lease::jemalloc)
endif()
target_link_libraries(stagingd_core PRIVATE stagingd::jemalloc)
