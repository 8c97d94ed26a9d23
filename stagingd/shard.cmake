# The shard format, the store and the synthetic store generator
# (docs/shard-format.md). Block checksums come from the C reference kernel.
target_sources(stagingd_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/shard.c
  ${CMAKE_CURRENT_LIST_DIR}/store.c
  ${CMAKE_CURRENT_LIST_DIR}/store_cli.c
  ${CMAKE_CURRENT_LIST_DIR}/gen.c)
target_link_libraries(stagingd_core PUBLIC kernels_ref)
