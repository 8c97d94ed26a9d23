# The staging reader (docs/staging-reads.md): io_uring reads of file ranges
# into staging memory on N staging threads, with a pread fallback.
target_sources(stagingd_core PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/reader.c"
  "${CMAKE_CURRENT_LIST_DIR}/reader_thread.c")

# stage-bench: our reader against a plain multi-threaded pread, staging a
# page-cache-hot file or shard store. Statically linked like stagingd so the
# binary runs as is on the GPU machine (bench/stage_bench.c).
add_executable(stage-bench "${PROJECT_SOURCE_DIR}/bench/stage_bench.c")
target_link_libraries(stage-bench PRIVATE stagingd_core stagingd::jemalloc lease_build_flags)
