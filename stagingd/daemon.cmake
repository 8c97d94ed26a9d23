# The daemon (docs/stagingd.md): settings, log, the job pipeline, the event
# loop with signals and the control socket; `stagingd run | job | ctl`.
target_sources(stagingd_core PRIVATE
  "${CMAKE_CURRENT_LIST_DIR}/log.c"
  "${CMAKE_CURRENT_LIST_DIR}/config.c"
  "${CMAKE_CURRENT_LIST_DIR}/job.c"
  "${CMAKE_CURRENT_LIST_DIR}/control.c"
  "${CMAKE_CURRENT_LIST_DIR}/daemon.c")
set_property(SOURCE "${CMAKE_CURRENT_LIST_DIR}/daemon.c" APPEND PROPERTY
             COMPILE_DEFINITIONS STAGINGD_VERSION="${PROJECT_VERSION}")
