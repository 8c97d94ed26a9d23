# The lease client (docs/lease-client.md): wire protocol v1 to one GPU agent
# per GPU, segment offers, batched leases, submits, doorbells, reconnects.
target_sources(stagingd_core PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/client.c"
  "${CMAKE_CURRENT_LIST_DIR}/client_msg.c"
  "${CMAKE_CURRENT_LIST_DIR}/client_map.c")
