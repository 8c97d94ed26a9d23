# Finds what the project needs of the CUDA toolkit -- nvcc, cuda.h and libcuda
# (the Driver API; nothing links the runtime) -- without FindCUDAToolkit:
# stock CMake 3.25 (Debian 12) fails inside that module on CUDA 13, which
# ships no libnvToolsExt, as soon as cmake_minimum_required is 3.25 or newer.
#
# In:  LEASE_WITH_CUDA, LEASE_CUDA_ROOT (the toolkit; nvcc on PATH if the
#      default /usr/local/cuda has none), LEASE_CUDA_MIN_VERSION, LEASE_GPU_ARCH.
# Out: LEASE_HAVE_CUDA; target CUDA::cuda_driver; and, under FindCUDAToolkit's
#      names so the rest of the tree reads them unchanged,
#      CUDAToolkit_NVCC_EXECUTABLE, CUDAToolkit_BIN_DIR,
#      CUDAToolkit_INCLUDE_DIRS, CUDAToolkit_VERSION.
# A toolkit that is there but cannot compile (no g++, unsupported host
# compiler) stops configure with the reason: silently building without the
# GPU parts would hide it.

set(LEASE_CUDA_ROOT "/usr/local/cuda" CACHE PATH "Where the CUDA toolkit lives")
set(LEASE_CUDA_MIN_VERSION 13 CACHE STRING "Oldest CUDA toolkit accepted (major version)")
option(LEASE_WITH_CUDA "Look for the CUDA toolkit (OFF: build and test only the CUDA-free parts)" ON)

set(LEASE_HAVE_CUDA OFF)
set(LEASE_CUDA_WHY "")

# A different root invalidates everything found under the previous one.
if(NOT "${LEASE_CUDA_ROOT}" STREQUAL "${LEASE__CUDA_ROOT_SEEN}")
  unset(LEASE_CUDA_NVCC CACHE)
  unset(LEASE_CUDA_INCLUDE_DIR CACHE)
  unset(LEASE_CUDA_DRIVER_LIBRARY CACHE)
  unset(LEASE__CUDA_PROBED CACHE)
endif()
set(LEASE__CUDA_ROOT_SEEN "${LEASE_CUDA_ROOT}" CACHE INTERNAL "")

# lease__cuda_find(): sets LEASE_HAVE_CUDA and the outputs above, or
# LEASE_CUDA_WHY to why not. A function so early returns stay local.
function(lease__cuda_find)
  find_program(LEASE_CUDA_NVCC nvcc HINTS "${LEASE_CUDA_ROOT}/bin" NO_DEFAULT_PATH
               DOC "nvcc of the CUDA toolkit")
  # PATH only stands in for the default root: a root given by hand that
  # holds no toolkit is a mistake to report, not to work around.
  if(NOT LEASE_CUDA_NVCC AND LEASE_CUDA_ROOT STREQUAL "/usr/local/cuda")
    find_program(LEASE_CUDA_NVCC nvcc DOC "nvcc of the CUDA toolkit")
  endif()
  if(NOT LEASE_CUDA_NVCC)
    if(LEASE_CUDA_ROOT STREQUAL "/usr/local/cuda")
      set(LEASE_CUDA_WHY "no nvcc in ${LEASE_CUDA_ROOT}/bin or on PATH" PARENT_SCOPE)
    else()
      set(LEASE_CUDA_WHY "no nvcc in ${LEASE_CUDA_ROOT}/bin (LEASE_CUDA_ROOT)" PARENT_SCOPE)
    endif()
    return()
  endif()
  # The toolkit root is where nvcc really lives (PATH may hold a wrapper or
  # a symlink such as /usr/bin/nvcc).
  file(REAL_PATH "${LEASE_CUDA_NVCC}" nvcc_real)
  get_filename_component(bin_dir "${nvcc_real}" DIRECTORY)
  get_filename_component(root "${bin_dir}" DIRECTORY)

  execute_process(COMMAND "${LEASE_CUDA_NVCC}" --version
                  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "release [0-9.]+, V([0-9]+\\.[0-9]+(\\.[0-9]+)?)")
    string(STRIP "${out}" out)
    set(LEASE_CUDA_WHY "${LEASE_CUDA_NVCC} --version failed (exit ${rc}): ${out}" PARENT_SCOPE)
    return()
  endif()
  set(version "${CMAKE_MATCH_1}")
  string(REGEX MATCH "^[0-9]+" major "${version}")
  if(major LESS LEASE_CUDA_MIN_VERSION)
    set(LEASE_CUDA_WHY "${LEASE_CUDA_NVCC} is CUDA ${version}; ${LEASE_CUDA_MIN_VERSION} or newer is needed"
        PARENT_SCOPE)
    return()
  endif()

  # Toolkits put headers and stubs in include/ and lib64/ (often symlinks
  # into targets/<triple>/); pip-assembled ones sometimes only in lib/.
  set(triples "${CMAKE_SYSTEM_PROCESSOR}-linux")
  if(CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
    list(APPEND triples sbsa-linux)
  endif()
  set(inc_hints "${root}/include")
  set(lib_hints "")
  foreach(t IN LISTS triples)
    list(APPEND inc_hints "${root}/targets/${t}/include")
  endforeach()
  foreach(d lib64 lib)
    list(APPEND lib_hints "${root}/${d}/stubs")
  endforeach()
  foreach(t IN LISTS triples)
    list(APPEND lib_hints "${root}/targets/${t}/lib/stubs")
  endforeach()

  find_path(LEASE_CUDA_INCLUDE_DIR cuda.h HINTS ${inc_hints} NO_DEFAULT_PATH
            DOC "The directory holding the toolkit's cuda.h")
  if(NOT LEASE_CUDA_INCLUDE_DIR)
    set(LEASE_CUDA_WHY "no cuda.h in ${inc_hints}" PARENT_SCOPE)
    return()
  endif()
  # The stub carries the SONAME libcuda.so.1, so the binaries load the real
  # driver wherever they run; a driver's own libcuda.so is the fallback.
  find_library(LEASE_CUDA_DRIVER_LIBRARY cuda HINTS ${lib_hints} NO_DEFAULT_PATH
               DOC "libcuda to link against (the toolkit's stub)")
  if(NOT LEASE_CUDA_DRIVER_LIBRARY)
    find_library(LEASE_CUDA_DRIVER_LIBRARY cuda DOC "libcuda to link against (the toolkit's stub)")
  endif()
  if(NOT LEASE_CUDA_DRIVER_LIBRARY)
    set(LEASE_CUDA_WHY "no libcuda.so in ${lib_hints} nor in the system's library directories"
        PARENT_SCOPE)
    return()
  endif()

  set(CUDAToolkit_NVCC_EXECUTABLE "${LEASE_CUDA_NVCC}" PARENT_SCOPE)
  set(CUDAToolkit_BIN_DIR "${bin_dir}" PARENT_SCOPE)
  set(CUDAToolkit_INCLUDE_DIRS "${LEASE_CUDA_INCLUDE_DIR}" PARENT_SCOPE)
  set(CUDAToolkit_VERSION "${version}" PARENT_SCOPE)
  set(LEASE_HAVE_CUDA ON PARENT_SCOPE)
endfunction()

# lease__cuda_probe(): nvcc runs the host C++ compiler even for a cubin
# (g++'s cc1plus preprocesses the .cu), and Debian's gcc does not bring it.
# Compiling one tiny kernel now turns that, or a host compiler nvcc rejects,
# into a configure error that says so instead of a failure deep in the build.
function(lease__cuda_probe)
  find_program(LEASE_CUDA_HOST_CXX g++ DOC "The host C++ compiler nvcc runs")
  if(NOT LEASE_CUDA_HOST_CXX)
    message(FATAL_ERROR
      "CUDA ${CUDAToolkit_VERSION} found (${CUDAToolkit_NVCC_EXECUTABLE}), but no g++ on PATH: "
      "nvcc runs g++ (cc1plus) to compile the kernels.\n"
      "Install it (apt-get install g++; `make deps` does this when the toolkit is present), "
      "or configure with -DLEASE_WITH_CUDA=OFF to build only the CUDA-free parts.")
  endif()
  set(key "${CUDAToolkit_NVCC_EXECUTABLE}|${CUDAToolkit_VERSION}|${LEASE_CUDA_HOST_CXX}|${LEASE_GPU_ARCH}")
  if("${LEASE__CUDA_PROBED}" STREQUAL "${key}")
    return()
  endif()
  set(dir "${CMAKE_BINARY_DIR}/CMakeFiles/lease-nvcc-probe")
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${dir}/probe.cu" "extern \"C\" __global__ void k_probe(int *p) { *p = 1; }\n")
  execute_process(
    COMMAND "${CUDAToolkit_NVCC_EXECUTABLE}" -cubin
            -gencode arch=compute_${LEASE_GPU_ARCH},code=sm_${LEASE_GPU_ARCH}
            -o "${dir}/probe.cubin" "${dir}/probe.cu"
    OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(STRIP "${out}" out)
    message(FATAL_ERROR
      "CUDA ${CUDAToolkit_VERSION} found, but nvcc cannot compile a one-line kernel for "
      "sm_${LEASE_GPU_ARCH} with host compiler ${LEASE_CUDA_HOST_CXX} (exit ${rc}):\n${out}\n"
      "Fix the toolkit or its host compiler, or configure with -DLEASE_WITH_CUDA=OFF.")
  endif()
  set(LEASE__CUDA_PROBED "${key}" CACHE INTERNAL "")
endfunction()

if(NOT LEASE_WITH_CUDA)
  set(LEASE_CUDA_WHY "LEASE_WITH_CUDA is OFF")
else()
  lease__cuda_find()
endif()

if(LEASE_HAVE_CUDA)
  lease__cuda_probe()
  add_library(CUDA::cuda_driver SHARED IMPORTED GLOBAL)
  set_target_properties(CUDA::cuda_driver PROPERTIES
    IMPORTED_LOCATION "${LEASE_CUDA_DRIVER_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS}")
  message(STATUS "CUDA toolkit ${CUDAToolkit_VERSION}: nvcc ${CUDAToolkit_NVCC_EXECUTABLE}, "
                 "libcuda ${LEASE_CUDA_DRIVER_LIBRARY}, host compiler ${LEASE_CUDA_HOST_CXX}")
endif()
