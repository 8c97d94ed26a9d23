# ga exec (docs/gpu-exec.md): the worker pool, streams and events by managed
# id, record_allocation and doorbells. The id table, the pool's machinery and
# the completion thread are driver-free (ga_pure, tested on any machine); the
# rest calls the driver (ga_core).
target_sources(ga_pure PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/idtab.c"
  "${CMAKE_CURRENT_LIST_DIR}/pool.c"
  "${CMAKE_CURRENT_LIST_DIR}/completion.c")
target_link_libraries(ga_pure PUBLIC lease_types Threads::Threads)

target_sources(ga_core PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/pool_device.c"
  "${CMAKE_CURRENT_LIST_DIR}/streams.c"
  "${CMAKE_CURRENT_LIST_DIR}/events.c"
  "${CMAKE_CURRENT_LIST_DIR}/doorbell.c")
# record_allocation pins and unpins leases through the lease service.
target_link_libraries(ga_core PUBLIC lease_core)

# Doorbell against socket latency, CUDA-free child process (bench/).
add_executable(doorbell-bench "${PROJECT_SOURCE_DIR}/bench/doorbell_bench.c")
target_include_directories(doorbell-bench PRIVATE "${CMAKE_CURRENT_LIST_DIR}")
target_link_libraries(doorbell-bench PRIVATE ga_core base lease_build_flags)
target_compile_options(doorbell-bench PRIVATE "-fmacro-prefix-map=${PROJECT_SOURCE_DIR}/=")
