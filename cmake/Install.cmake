# cmake --install: the programs, the lease-types headers with lease-types.pc,
# the man pages, the systemd units and their files (docs/operations.md,
# "Installing"). Included last by the top-level CMakeLists.txt, so every
# target exists. Paths inside the .pc and the units are computed at install
# time, so `cmake --install build --prefix DIR` writes DIR into them; DESTDIR
# is honoured as usual. liblease-client installs itself (stagingd/lib, the
# component lease-client); lease-agent and lease-agent-host are the targets
# of gpu/cuda and gpu/server, installed from here by name.
include(GNUInstallDirs)

set(_lease_programs stagingd leasectl lease-agent-host)
if(TARGET lease-agent)
  list(APPEND _lease_programs lease-agent)
  set(_lease_agent_exec "lease-agent --device %i")
else()
  # Without the CUDA toolkit the unit serves with the host backend.
  set(_lease_agent_exec "lease-agent-host")
endif()
install(TARGETS ${_lease_programs} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")

# Header-only: lease-types.pc is arch-independent, so share/pkgconfig, and
# relocatable (${pcfiledir}) wherever the tree is copied.
install(DIRECTORY "${PROJECT_SOURCE_DIR}/lease-types/include/lease_types"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" FILES_MATCHING PATTERN "*.h")
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/install/lease-types.pc"
  "prefix=\${pcfiledir}/../..\n"
  "includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}\n"
  "\n"
  "Name: lease-types\n"
  "Description: Wire protocol v1 of the host-memory lease service: messages, ids, classes, validators (header-only, C11)\n"
  "Version: ${PROJECT_VERSION}\n"
  "Cflags: -I\${includedir}\n")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/install/lease-types.pc"
        DESTINATION "${CMAKE_INSTALL_DATADIR}/pkgconfig")

# man 8 lease-agent, stagingd, leasectl; lease-agent-host is lease-agent's page.
install(FILES "${PROJECT_SOURCE_DIR}/docs/man/lease-agent.8" "${PROJECT_SOURCE_DIR}/docs/man/stagingd.8"
              "${PROJECT_SOURCE_DIR}/docs/man/leasectl.8" "${PROJECT_SOURCE_DIR}/docs/man/lease-agent-host.8"
        DESTINATION "${CMAKE_INSTALL_MANDIR}/man8")

# The units name the installed programs and config, so they are written at
# install time. systemd's own paths: units in <prefix>/lib/systemd/system,
# sysusers in <prefix>/lib/sysusers.d; config in /etc for prefix /usr, else
# <prefix>/etc. LEASE_SYSTEMD_UNIT_DIR overrides the units' folder.
set(LEASE_SYSTEMD_UNIT_DIR "" CACHE PATH
    "Where cmake --install puts the systemd units (default: <prefix>/lib/systemd/system)")
set(_sd "${PROJECT_SOURCE_DIR}/scripts/systemd")
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(BINDIR \"\${prefix}/${CMAKE_INSTALL_BINDIR}\")
  if(prefix STREQUAL \"/usr\")
    set(SYSCONFDIR \"/etc\")
  else()
    set(SYSCONFDIR \"\${prefix}/etc\")
  endif()
  set(AGENT_EXEC \"\${BINDIR}/${_lease_agent_exec}\")
  set(unitdir \"${LEASE_SYSTEMD_UNIT_DIR}\")
  if(NOT unitdir)
    set(unitdir \"\${prefix}/lib/systemd/system\")
  endif()
  set(gen \"${CMAKE_CURRENT_BINARY_DIR}/install/units\")
  configure_file(\"${_sd}/lease-agent@.service.in\" \"\${gen}/lease-agent@.service\" @ONLY)
  configure_file(\"${_sd}/stagingd.service.in\" \"\${gen}/stagingd.service\" @ONLY)
  file(INSTALL \"\${gen}/lease-agent@.service\" \"\${gen}/stagingd.service\"
       DESTINATION \"\${unitdir}\")
  file(INSTALL \"${_sd}/lease-pinning.sysusers\" DESTINATION \"\${prefix}/lib/sysusers.d\"
       RENAME lease-pinning.conf)
  # The examples never overwrite an operator's files.
  foreach(f stagingd.conf lease-agent.conf lease-agent.env)
    if(EXISTS \"\$ENV{DESTDIR}\${SYSCONFDIR}/lease-pinning/\${f}\")
      message(STATUS \"Kept: \${SYSCONFDIR}/lease-pinning/\${f}\")
    else()
      file(INSTALL \"${_sd}/\${f}\" DESTINATION \"\${SYSCONFDIR}/lease-pinning\")
    endif()
  endforeach()
")
