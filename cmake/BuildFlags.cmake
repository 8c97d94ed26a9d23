# One interface target carries every compile and link flag the project's own
# targets need; nothing is set globally, so third-party code keeps its flags.
add_library(lease_build_flags INTERFACE)
target_compile_definitions(lease_build_flags INTERFACE _GNU_SOURCE)
target_compile_options(lease_build_flags INTERFACE
  -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
  -Wmissing-prototypes -Wformat=2 -Wvla -fvisibility=hidden)
target_link_libraries(lease_build_flags INTERFACE Threads::Threads)

option(LEASE_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(LEASE_SANITIZE)
  target_compile_options(lease_build_flags INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer)
  target_link_options(lease_build_flags INTERFACE -fsanitize=address,undefined)
endif()
