# find_package(lease-client): lease::client (liblease-client.so) and
# lease::client_static (liblease-client.a), header <lease/client.h>.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
include("${CMAKE_CURRENT_LIST_DIR}/lease-client-targets.cmake")
