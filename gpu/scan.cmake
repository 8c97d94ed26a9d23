# The vector scan (kernels/scan.cu) on the device, and its benchmark
# bench/scan_bench.c (copy ceiling, pinned pipeline, zero-copy, kernels alone).
target_sources(ga_core PRIVATE ${CMAKE_CURRENT_LIST_DIR}/scan.c)

add_executable(scan-bench ${PROJECT_SOURCE_DIR}/bench/scan_bench.c)
# The bench launches the checksum kernel itself on its own streams, so it
# reads gpu/'s internal headers.
target_include_directories(scan-bench PRIVATE "${CMAKE_CURRENT_LIST_DIR}")
target_link_libraries(scan-bench PRIVATE ga_core kernels_ref base CUDA::cuda_driver lease_build_flags)
target_compile_options(scan-bench PRIVATE "-fmacro-prefix-map=${PROJECT_SOURCE_DIR}/=")
