# The CUDA executor (docs/agent.md, "The CUDA executor"): the agent's work on
# the GPU behind the executor table the socket server calls. It joins the
# driver-side gpu/ code (ga_core) with the CUDA-free server (ga_server), and
# lease-agent serves with it.
add_library(ga_executor_cuda STATIC
  "${CMAKE_CURRENT_LIST_DIR}/executor_cuda.c"
  "${CMAKE_CURRENT_LIST_DIR}/executor_cuda_ops.c")
target_include_directories(ga_executor_cuda
  PUBLIC "${CMAKE_CURRENT_LIST_DIR}/include"
  PRIVATE "${CMAKE_CURRENT_LIST_DIR}")
target_link_libraries(ga_executor_cuda
  PUBLIC ga_core ga_server
  PRIVATE kernels_ref lease_build_flags)
target_compile_options(ga_executor_cuda PRIVATE "-fmacro-prefix-map=${PROJECT_SOURCE_DIR}/=")

# lease-agent: --self-test, or the server with the CUDA (default) or host backend.
target_link_libraries(lease-agent PRIVATE ga_executor_cuda ga_server lease_cuda)
