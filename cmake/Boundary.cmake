# The CUDA boundary in CMake (docs/boundary.md).
#
#   lease_prove_cuda_free(<target> [ALLOW <item>...] [IMPORTS <file>])
#       Every check a CUDA-free program gets, in one call: the configure-time
#       walk (now, and again once the whole project is read), the allow-list of
#       what it may link, the link-time trace (tools/linkcheck/linkguard.c) and
#       linkcheck after every link, with <file> as its allowed imports.
#   lease_assert_cuda_free(<target>)
#       The walk alone: refuse to configure when anything in <target>'s link
#       closure is, or names, a CUDA library.
#   lease_assert_links_only(<target> ALLOW <item>...)
#       Refuse, once the project is read, any library in the closure that is
#       not an ALLOW item, the C runtime or a target built in the folder this
#       is called from or below (stagingd/ and its sub-folders).
#
# The walk reads what CMake was told: link items, LINKER:/-Wl, options, a
# dependency's interface options, generator expressions (every branch, every
# configuration), LINK_FLAGS, the CMAKE_*_LINKER_FLAGS family, imported
# locations and sources. It cannot be CMake's own evaluation, so the link
# itself is traced too: that is the layer that cannot be talked around.

set(_LEASE_BOUNDARY_DIR "${CMAKE_CURRENT_LIST_DIR}")

# Kept for scripts that used the old single regex; the walk uses the stems.
set(LEASE_CUDA_FORBIDDEN_REGEX
    "(^CUDA::)|(^|[/:])lib(cuda|cudart|nvrtc|nvJitLink|nvidia-)[^/]*$|^-l(cuda|cudart|nvrtc|nvJitLink|nvidia-)"
    CACHE INTERNAL "Link items that may never reach a CUDA-free target")

# Libraries a derived stem must never forbid: a toolkit folder may hold a
# copy of one (the same guard as tools/linkcheck/src/family.c).
set(_LEASE_BOUNDARY_COMMON
  libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libgcc_s.so.1 libstdc++.so.6
  libz.so.1 libgomp.so.1 libcrypt.so.1 libutil.so.1 libresolv.so.2 libmvec.so.1
  libatomic.so.1 libssl.so.3 libcrypto.so.3 libuuid.so.1 liburing.so.2 libjemalloc.so.2
  libasan.so.8 libubsan.so.1 libelf.so.1 libnuma.so.1 libffi.so.8 libzstd.so.1)

# Targets and library names every C program may link.
set(_LEASE_BOUNDARY_RUNTIME lease_build_flags Threads::Threads c m dl rt pthread)

# ---- the forbidden stems --------------------------------------------------

# _lease_boundary_toolkit_dirs(<out-var>): the library folders of every CUDA
# toolkit and driver installation this machine has.
function(_lease_boundary_toolkit_dirs out_var)
  set(roots "")
  foreach(v CUDAToolkit_LIBRARY_ROOT CUDAToolkit_ROOT LEASE_CUDA_ROOT)
    if(${v})
      list(APPEND roots "${${v}}")
    endif()
  endforeach()
  foreach(v CUDA_HOME CUDA_PATH CUDA_ROOT)
    if(DEFINED ENV{${v}})
      list(APPEND roots "$ENV{${v}}")
    endif()
  endforeach()
  file(GLOB versioned LIST_DIRECTORIES true /usr/local/cuda-* /usr/local/cuda)
  list(APPEND roots ${versioned} /opt/cuda /usr/lib/cuda)
  set(dirs "")
  if(CUDAToolkit_LIBRARY_DIR)
    list(APPEND dirs "${CUDAToolkit_LIBRARY_DIR}")
  endif()
  foreach(root IN LISTS roots)
    foreach(sub lib64 lib lib64/stubs lib/stubs targets/*/lib targets/*/lib/stubs
                extras/CUPTI/lib64 extras/CUPTI/lib nvvm/lib64 nvvm/lib compat)
      file(GLOB found LIST_DIRECTORIES true "${root}/${sub}")
      list(APPEND dirs ${found})
    endforeach()
  endforeach()
  list(APPEND dirs /usr/lib/x86_64-linux-gnu/nvidia/current /usr/lib/x86_64-linux-gnu/nvidia
       /usr/lib/nvidia /usr/lib64/nvidia /usr/local/nvidia/lib64 /usr/local/nvidia/lib
       /usr/lib/wsl/lib)
  set(real "")
  foreach(d IN LISTS dirs)
    if(IS_DIRECTORY "${d}")
      file(REAL_PATH "${d}" r)
      list(APPEND real "${r}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES real)
  set(${out_var} "${real}" PARENT_SCOPE)
endfunction()

# _lease_boundary_stems(<out-var>): the fixed floor (forbidden_stems.def),
# plus the stem of every library found installed with a toolkit or the
# driver, lower-cased; computed once per configure.
function(_lease_boundary_stems out_var)
  get_property(have GLOBAL PROPERTY _LEASE_BOUNDARY_STEMS SET)
  if(have)
    get_property(stems GLOBAL PROPERTY _LEASE_BOUNDARY_STEMS)
    set(${out_var} "${stems}" PARENT_SCOPE)
    return()
  endif()
  set(def "${_LEASE_BOUNDARY_DIR}/../tools/linkcheck/include/linkcheck/forbidden_stems.def")
  file(STRINGS "${def}" lines REGEX "^LC_STEM\\(\"[^\"]+\"\\)")
  set(stems "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^LC_STEM\\(\"([^\"]+)\"\\).*" "\\1" stem "${line}")
    string(TOLOWER "${stem}" stem)
    list(APPEND stems "${stem}")
  endforeach()
  if(NOT stems)
    message(FATAL_ERROR "CUDA boundary: expected the forbidden stems in ${def}, found none")
  endif()
  _lease_boundary_toolkit_dirs(dirs)
  set(found "")
  foreach(d IN LISTS dirs)
    file(GLOB libs RELATIVE "${d}" "${d}/lib*.so*" "${d}/lib*.a")
    list(APPEND found ${libs})
  endforeach()
  foreach(d /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /usr/local/lib)
    file(GLOB libs RELATIVE "${d}" "${d}/lib*nvidia*.so*")
    list(APPEND found ${libs})
  endforeach()
  set(derived 0)
  foreach(name IN LISTS found)
    string(REGEX REPLACE "\\.so(\\..*)?$" "" stem "${name}")
    string(REGEX REPLACE "\\.a$" "" stem "${stem}")
    string(TOLOWER "${stem}" stem)
    _lease_boundary_stem_match("${stem}" "${stems}" covered)
    set(generic FALSE)
    foreach(common IN LISTS _LEASE_BOUNDARY_COMMON)
      string(FIND "${common}" "${stem}" at)
      if(at EQUAL 0)
        set(generic TRUE)
      endif()
    endforeach()
    if(NOT covered AND NOT generic AND stem MATCHES "^lib..")
      list(APPEND stems "${stem}")
      math(EXPR derived "${derived} + 1")
    endif()
  endforeach()
  list(LENGTH stems n)
  if(dirs)
    list(JOIN dirs " " where)
    message(STATUS "CUDA boundary: ${n} library stems forbidden (${derived} more than the fixed "
                   "list, from ${where})")
  else()
    message(STATUS "CUDA boundary: ${n} library stems forbidden: no CUDA toolkit or driver here, "
                   "so the fixed list only")
  endif()
  set_property(GLOBAL PROPERTY _LEASE_BOUNDARY_STEMS "${stems}")
  set_property(GLOBAL PROPERTY _LEASE_BOUNDARY_DIRS "${dirs}")
  set(${out_var} "${stems}" PARENT_SCOPE)
endfunction()

# _lease_boundary_stem_match(<name> <stems> <out-var>): the stem <name> (a
# lower-case file name) starts with, or "".
function(_lease_boundary_stem_match name stems out_var)
  set(hit "")
  foreach(stem IN LISTS stems)
    string(FIND "${name}" "${stem}" at)
    if(at EQUAL 0)
      set(hit "${stem}")
      break()
    endif()
  endforeach()
  set(${out_var} "${hit}" PARENT_SCOPE)
endfunction()

# ---- reading one value ----------------------------------------------------

# _lease_boundary_tokens(<value> <out-var>): the words of a link item or
# option, split at every separator CMake, the compiler driver or the linker
# knows (space ; , = : < > $ quotes), "::" kept. A value with generator
# expressions is read a second time with them taken out and their pieces
# joined, so cu$<0:>da reads "cuda".
function(_lease_boundary_tokens value out_var)
  set(variants "${value}")
  if(value MATCHES "\\$<")
    string(REGEX REPLACE "\\$<[A-Za-z0-9_]*:?" "" flat "${value}")
    string(REPLACE ">" "" flat "${flat}")
    list(APPEND variants "${flat}")
    string(REGEX REPLACE "[,;]" "" joined "${flat}")
    list(APPEND variants "${joined}")
  endif()
  set(tokens "")
  foreach(v IN LISTS variants)
    string(REPLACE "::" "_LEASE_DCOLON_" v "${v}")
    string(REGEX REPLACE "[ \t\r\n,=\"'<>$(){}:]+" ";" v "${v}")
    string(REPLACE "_LEASE_DCOLON_" "::" v "${v}")
    list(APPEND tokens ${v})
  endforeach()
  set(${out_var} "${tokens}" PARENT_SCOPE)
endfunction()

# _lease_boundary_culprit(<token> <previous token> <mode> <stems> <out-var>):
# why <token> links CUDA, or "". <mode> ITEM: a link item, where a plain word
# is a library name; FLAGS: an option string, where only -l, --library and
# paths name libraries; SOURCE: a source file.
function(_lease_boundary_culprit token prev mode stems out_var)
  string(TOLOWER "${token}" t)
  string(TOLOWER "${prev}" p)
  set(why "")
  set(name "")
  if(t MATCHES "^cuda::")
    set(why "a CUDA toolkit target")
  elseif(t MATCHES "^(-l:|--library=:)(.+)$")
    get_filename_component(name "${CMAKE_MATCH_2}" NAME)
  elseif(t MATCHES "^(-l|--library=)(.+)$")
    set(name "lib${CMAKE_MATCH_2}")
  elseif(t MATCHES "/")
    get_filename_component(name "${t}" NAME)
    # A file in a toolkit or driver library folder, whatever its name.
    get_filename_component(dir "${token}" DIRECTORY)
    get_property(family_dirs GLOBAL PROPERTY _LEASE_BOUNDARY_DIRS)
    if(dir AND family_dirs AND NOT mode STREQUAL "SOURCE" AND name MATCHES "^lib|\\.(so|a|o)(\\.|$)")
      file(REAL_PATH "${dir}" real_dir)
      if(real_dir IN_LIST family_dirs)
        set(why "a file in ${real_dir}, a CUDA toolkit or driver library folder")
      endif()
    endif()
  elseif(t MATCHES "^[a-z0-9_+.-]+$" AND NOT t MATCHES "^-")
    if(p MATCHES "^(-l|--library|-xlinker)$" OR mode STREQUAL "ITEM")
      if(t MATCHES "^lib")
        set(name "${t}")
      else()
        set(name "lib${t}")
      endif()
    endif()
  endif()
  if(NOT why AND NOT mode STREQUAL "SOURCE" AND token MATCHES "^/" AND EXISTS "${token}"
     AND NOT IS_DIRECTORY "${token}")
    _lease_boundary_peek("${token}" "${stems}" why)
  endif()
  if(mode STREQUAL "SOURCE" AND t MATCHES "\\.(cu|cubin|fatbin|ptx)$")
    set(why "a CUDA source")
  endif()
  if(name AND NOT why)
    _lease_boundary_stem_match("${name}" "${stems}" stem)
    if(stem)
      set(why "a forbidden library (stem '${stem}')")
    endif()
  endif()
  set(${out_var} "${why}" PARENT_SCOPE)
endfunction()

# _lease_boundary_peek(<file> <stems> <out-var>): what an existing file is
# under its name: the real file behind a symlink, and for a shared library
# the library names in its first 64 KiB (its SONAME and DT_NEEDED live
# there), so a renamed copy of the driver is seen before the link.
function(_lease_boundary_peek file stems out_var)
  get_property(cached GLOBAL PROPERTY "_LEASE_BOUNDARY_PEEK_${file}" SET)
  if(cached)
    get_property(why GLOBAL PROPERTY "_LEASE_BOUNDARY_PEEK_${file}")
    set(${out_var} "${why}" PARENT_SCOPE)
    return()
  endif()
  set(why "")
  file(REAL_PATH "${file}" real)
  get_filename_component(real_name "${real}" NAME)
  string(TOLOWER "${real_name}" real_name)
  _lease_boundary_stem_match("${real_name}" "${stems}" stem)
  if(stem)
    set(why "it is ${real}, a forbidden library (stem '${stem}')")
  elseif(real_name MATCHES "\\.so(\\.|$)")
    file(STRINGS "${real}" names LIMIT_INPUT 65536 REGEX "lib[A-Za-z0-9_+-]+\\.so")
    foreach(n IN LISTS names)
      string(REGEX MATCH "lib[A-Za-z0-9_+-]+\\.so[.0-9]*" n "${n}")
      string(TOLOWER "${n}" lower)
      _lease_boundary_stem_match("${lower}" "${stems}" stem)
      if(stem)
        set(why "its dynamic section names ${n}, a forbidden library (stem '${stem}')")
        break()
      endif()
    endforeach()
  endif()
  set_property(GLOBAL PROPERTY "_LEASE_BOUNDARY_PEEK_${file}" "${why}")
  set(${out_var} "${why}" PARENT_SCOPE)
endfunction()

# ---- the walk ---------------------------------------------------------------

# The configurations a generator expression or _<CONFIG> property may pick.
function(_lease_boundary_configs out_var)
  set(cfgs Debug Release RelWithDebInfo MinSizeRel ${CMAKE_CONFIGURATION_TYPES}
      ${CMAKE_BUILD_TYPE})
  set(up "")
  foreach(c IN LISTS cfgs)
    string(TOUPPER "${c}" c)
    list(APPEND up "${c}")
  endforeach()
  list(REMOVE_DUPLICATES up)
  set(${out_var} "${up}" PARENT_SCOPE)
endfunction()

# _lease_boundary_walk_value(<value> <path> <mode>): checks one value,
# recording culprits in `bad`, libraries in `libs` ("kind|name|path"), and
# walks every target it names. The lists live in the caller's scope.
function(_lease_boundary_walk_value value path mode)
  _lease_boundary_stems(stems)
  string(REPLACE ";" "," shown "${value}")
  _lease_boundary_tokens("${value}" tokens)
  # $<TARGET_PROPERTY:tgt,PROP> and $<TARGET_PROPERTY:PROP> read any
  # property, a custom one too: walk what it reads.
  string(REGEX MATCHALL "\\$<TARGET_PROPERTY:[^>$]+>" reads "${value}")
  foreach(read IN LISTS reads)
    string(REGEX REPLACE "^\\$<TARGET_PROPERTY:(.*)>$" "\\1" args "${read}")
    string(REPLACE "," ";" args "${args}")
    list(LENGTH args nargs)
    if(nargs EQUAL 2)
      list(GET args 0 of)
      list(GET args 1 prop)
    else()
      set(of "${_lease_boundary_owner}")
      set(prop "${args}")
    endif()
    if(TARGET "${of}" AND NOT prop MATCHES "^(LINK_LIBRARIES|INTERFACE_LINK_LIBRARIES)$")
      get_target_property(read_value "${of}" "${prop}")
      if(read_value)
        foreach(rv IN LISTS read_value)
          _lease_boundary_walk_value("${rv}" "${path} -> ${shown} [${of} ${prop}]" ${mode})
        endforeach()
      endif()
    endif()
  endforeach()
  set(prev "")
  foreach(tok IN LISTS tokens)
    _lease_boundary_culprit("${tok}" "${prev}" "${mode}" "${stems}" why)
    if(why)
      if(tok STREQUAL value)
        list(APPEND bad "${path} -> ${shown}: ${why}")
      else()
        list(APPEND bad "${path} -> ${shown} (${tok}: ${why})")
      endif()
    endif()
    if(TARGET "${tok}")
      if(tok STREQUAL value)
        _lease_boundary_walk_target("${tok}" "${path} -> ${tok}")
      else()
        _lease_boundary_walk_target("${tok}" "${path} -> ${shown} -> ${tok}")
      endif()
    elseif(NOT mode STREQUAL "SOURCE")
      # What the allow-list judges: library names and files.
      if(tok MATCHES "^-l:?(.+)$")
        list(APPEND libs "name|${CMAKE_MATCH_1}|${path} -> ${shown}")
      elseif(tok MATCHES "/.*\\.(a|so|so\\..*|o)$")
        list(APPEND libs "file|${tok}|${path} -> ${shown}")
      elseif(mode STREQUAL "ITEM" AND tok STREQUAL value AND tok MATCHES "^[A-Za-z0-9_+.-]+$")
        list(APPEND libs "name|${tok}|${path} -> ${shown}")
      endif()
    endif()
    set(prev "${tok}")
  endforeach()
  set(bad "${bad}" PARENT_SCOPE)
  set(libs "${libs}" PARENT_SCOPE)
  set(seen "${seen}" PARENT_SCOPE)
endfunction()

# _lease_boundary_items(<list> <out-var>): the items of a property as CMake
# sees them: a ';' inside a generator expression ($<JOIN:cu;da,>) does not
# split it.
function(_lease_boundary_items values out_var)
  set(items "")
  set(cur "")
  set(depth 0)
  foreach(v IN LISTS values)
    if(depth GREATER 0)
      string(APPEND cur ",${v}")
    else()
      set(cur "${v}")
    endif()
    string(REGEX MATCHALL "\\$<" opens "${v}")
    string(REGEX MATCHALL ">" closes "${v}")
    list(LENGTH opens o)
    list(LENGTH closes c)
    math(EXPR depth "${depth} + ${o} - ${c}")
    if(depth LESS_EQUAL 0)
      list(APPEND items "${cur}")
      set(depth 0)
    endif()
  endforeach()
  if(depth GREATER 0)
    list(APPEND items "${cur}")
  endif()
  set(${out_var} "${items}" PARENT_SCOPE)
endfunction()

# _lease_boundary_walk_target(<target> <path>)
function(_lease_boundary_walk_target target path)
  if(target IN_LIST seen)
    return()
  endif()
  list(APPEND seen "${target}")
  set(_lease_boundary_owner "${target}")
  list(APPEND libs "target|${target}|${path}")
  get_target_property(aliased "${target}" ALIASED_TARGET)
  if(aliased)
    _lease_boundary_walk_target("${aliased}" "${path} -> ${aliased}")
  else()
    _lease_boundary_configs(cfgs)
    get_target_property(type "${target}" TYPE)
    get_target_property(imported "${target}" IMPORTED)
    set(items LINK_LIBRARIES INTERFACE_LINK_LIBRARIES INTERFACE_LINK_LIBRARIES_DIRECT
        IMPORTED_LIBNAME IMPORTED_LINK_INTERFACE_LIBRARIES IMPORTED_LINK_DEPENDENT_LIBRARIES)
    set(files IMPORTED_LOCATION IMPORTED_IMPLIB IMPORTED_OBJECTS IMPORTED_SONAME)
    set(flags LINK_OPTIONS INTERFACE_LINK_OPTIONS LINK_FLAGS STATIC_LIBRARY_OPTIONS
        LINK_LIBRARY_OVERRIDE)
    foreach(cfg IN LISTS cfgs)
      list(APPEND items IMPORTED_LIBNAME_${cfg} IMPORTED_LINK_INTERFACE_LIBRARIES_${cfg}
           IMPORTED_LINK_DEPENDENT_LIBRARIES_${cfg})
      list(APPEND files IMPORTED_LOCATION_${cfg} IMPORTED_IMPLIB_${cfg} IMPORTED_OBJECTS_${cfg})
      list(APPEND flags LINK_FLAGS_${cfg})
    endforeach()
    foreach(group items files flags)
      set(mode ITEM)
      if(group STREQUAL "flags")
        set(mode FLAGS)
      endif()
      foreach(prop IN LISTS ${group})
        get_target_property(values "${target}" ${prop})
        if(NOT values)
          continue()
        endif()
        if(group STREQUAL "files")
          # The file of an imported target: judged by name, allowed with it.
          foreach(v IN LISTS values)
            _lease_boundary_stems(stems)
            _lease_boundary_culprit("${v}" "" FLAGS "${stems}" why)
            if(why)
              list(APPEND bad "${path} [${prop}] -> ${v}: ${why}")
            endif()
          endforeach()
          continue()
        endif()
        set(where "${path}")
        if(NOT prop MATCHES "^(LINK_LIBRARIES|INTERFACE_LINK_LIBRARIES)$")
          set(where "${path} [${prop}]")
        endif()
        _lease_boundary_items("${values}" values)
        foreach(v IN LISTS values)
          _lease_boundary_walk_value("${v}" "${where}" ${mode})
        endforeach()
      endforeach()
    endforeach()
    foreach(prop SOURCES INTERFACE_SOURCES)
      get_target_property(values "${target}" ${prop})
      if(values)
        foreach(v IN LISTS values)
          _lease_boundary_walk_value("${v}" "${path} [${prop}]" SOURCE)
        endforeach()
      endif()
    endforeach()
    get_target_property(lang "${target}" LINKER_LANGUAGE)
    if(lang STREQUAL "CUDA")
      list(APPEND bad "${path} [LINKER_LANGUAGE] -> CUDA: nvcc links the CUDA runtime in")
    endif()
    get_target_property(rt "${target}" CUDA_RUNTIME_LIBRARY)
    if(rt AND NOT rt MATCHES "^[Nn][Oo][Nn][Ee]$")
      list(APPEND bad "${path} [CUDA_RUNTIME_LIBRARY] -> ${rt}: links the CUDA runtime")
    endif()
  endif()
  set(bad "${bad}" PARENT_SCOPE)
  set(libs "${libs}" PARENT_SCOPE)
  set(seen "${seen}" PARENT_SCOPE)
endfunction()

# _lease_boundary_walk_dir(<target>): what the directory <target> is linked
# in adds to every link there: the CMAKE_*_LINKER_FLAGS family, the flags
# CMake passes to the link too, the link rules themselves, add_link_options.
function(_lease_boundary_walk_dir target)
  get_target_property(dir "${target}" SOURCE_DIR)
  get_directory_property(vars DIRECTORY "${dir}" VARIABLES)
  foreach(var IN LISTS vars)
    set(mode "")
    if(var MATCHES "DIRECTORIES$")
      # Search folders: what is linked from them is what counts.
    elseif(var MATCHES "^CMAKE_[A-Za-z_]*(STANDARD_LIBRARIES|IMPLICIT_LINK_LIBRARIES)")
      set(mode ITEM)
    elseif(var MATCHES "^CMAKE_.*LINK" OR var MATCHES "^CMAKE_.*_CREATE_"
           OR var MATCHES "^CMAKE_[A-Za-z]+_FLAGS(_[A-Za-z]+)?$")
      # Linker flags, link rules, -l and wrapper flags, link features.
      set(mode FLAGS)
    endif()
    if(mode)
      get_directory_property(v DIRECTORY "${dir}" DEFINITION "${var}")
      if(v AND NOT var MATCHES "IMPLICIT_LINK_LIBRARIES")
        _lease_boundary_walk_value("${v}" "${target} [${var}]" ${mode})
      elseif(v)
        # The compiler's own libraries: only a CUDA one among them matters.
        foreach(item IN LISTS v)
          _lease_boundary_stems(stems)
          _lease_boundary_culprit("${item}" "" ITEM "${stems}" why)
          if(why)
            list(APPEND bad "${target} [${var}] -> ${item}: ${why}")
          endif()
        endforeach()
      endif()
    endif()
  endforeach()
  get_directory_property(opts DIRECTORY "${dir}" LINK_OPTIONS)
  foreach(v IN LISTS opts)
    _lease_boundary_walk_value("${v}" "${target} [directory LINK_OPTIONS]" FLAGS)
  endforeach()
  set(bad "${bad}" PARENT_SCOPE)
  set(libs "${libs}" PARENT_SCOPE)
  set(seen "${seen}" PARENT_SCOPE)
endfunction()

# _lease_boundary_walk(<target> <bad-var> <libs-var> <count-var>)
function(_lease_boundary_walk target bad_var libs_var count_var)
  set(seen "")
  set(bad "")
  set(libs "")
  _lease_boundary_walk_target("${target}" "${target}")
  _lease_boundary_walk_dir("${target}")
  list(REMOVE_DUPLICATES bad)
  list(LENGTH libs n)
  set(${bad_var} "${bad}" PARENT_SCOPE)
  set(${libs_var} "${libs}" PARENT_SCOPE)
  set(${count_var} ${n} PARENT_SCOPE)
endfunction()

function(_lease_boundary_refuse target bad when)
  list(JOIN bad "\n  " report)
  message(FATAL_ERROR
    "CUDA boundary violated at configure time${when}: '${target}' must never link CUDA, "
    "but its link closure reaches:\n  ${report}\n"
    "Only lease/ and gpu/ may link CUDA::cuda_driver (see DESIGN.md, docs/boundary.md).")
endfunction()

# ---- the checks at the end of configure --------------------------------------

# Runs once the top-level CMakeLists.txt is read, after every deferred call
# the project queued before it (it queues itself again while any is left),
# so a link added later or by cmake_language(DEFER) is seen.
function(_lease_boundary_final)
  get_property(round GLOBAL PROPERTY _LEASE_BOUNDARY_ROUND)
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" GET_CALL_IDS pending)
  if(pending AND round LESS 16)
    math(EXPR round "${round} + 1")
    set_property(GLOBAL PROPERTY _LEASE_BOUNDARY_ROUND ${round})
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _lease_boundary_final)
    return()
  endif()
  get_property(targets GLOBAL PROPERTY _LEASE_BOUNDARY_TARGETS)
  foreach(target IN LISTS targets)
    _lease_boundary_walk("${target}" bad libs n)
    if(bad)
      _lease_boundary_refuse("${target}" "${bad}" " (at the end of configure)")
    endif()
    get_property(has_allow GLOBAL PROPERTY _LEASE_BOUNDARY_ALLOW_${target} SET)
    if(has_allow)
      get_property(allow GLOBAL PROPERTY _LEASE_BOUNDARY_ALLOW_${target})
      _lease_boundary_allowed("${target}" "${allow}" "${libs}")
    endif()
  endforeach()
endfunction()

function(_lease_boundary_schedule target)
  get_property(targets GLOBAL PROPERTY _LEASE_BOUNDARY_TARGETS)
  if(NOT target IN_LIST targets)
    set_property(GLOBAL APPEND PROPERTY _LEASE_BOUNDARY_TARGETS "${target}")
  endif()
  get_property(scheduled GLOBAL PROPERTY _LEASE_BOUNDARY_SCHEDULED)
  if(NOT scheduled)
    set_property(GLOBAL PROPERTY _LEASE_BOUNDARY_SCHEDULED TRUE)
    set_property(GLOBAL PROPERTY _LEASE_BOUNDARY_ROUND 0)
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _lease_boundary_final)
  endif()
endfunction()

# Whether every library in `libs` of <target> is allowed; FATAL_ERROR
# naming the others and the path to each.
function(_lease_boundary_allowed target allow libs)
  set(names ${allow} ${_LEASE_BOUNDARY_RUNTIME})
  # An allowed target is allowed under its alias and its real name.
  foreach(a IN LISTS allow)
    if(TARGET "${a}")
      get_target_property(real "${a}" ALIASED_TARGET)
      if(real)
        list(APPEND names "${real}")
      endif()
    endif()
  endforeach()
  get_property(own_dir GLOBAL PROPERTY _LEASE_BOUNDARY_FOLDER_${target})
  set(refused "")
  foreach(entry IN LISTS libs)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 kind)
    list(GET parts 1 name)
    list(GET parts 2 path)
    if(kind STREQUAL "target")
      if(name STREQUAL target OR name IN_LIST names)
        continue()
      endif()
      get_target_property(real "${name}" ALIASED_TARGET)
      if(real AND real IN_LIST names)
        continue()
      endif()
      # The daemon's own libraries, built in the calling folder or below (not
      # imported ones: a binary from elsewhere is named in ALLOW). A call at
      # the top of the project has no folder of its own.
      get_target_property(dir "${name}" SOURCE_DIR)
      get_target_property(imported "${name}" IMPORTED)
      string(FIND "${dir}/" "${own_dir}/" at)
      if(at EQUAL 0 AND NOT imported AND NOT own_dir STREQUAL CMAKE_SOURCE_DIR)
        continue()
      endif()
    else()
      if(kind STREQUAL "file")
        get_filename_component(base "${name}" NAME)
        string(REGEX REPLACE "^lib([^.]+)\\..*$" "\\1" name "${base}")
      endif()
      if(name IN_LIST names)
        continue()
      endif()
    endif()
    list(APPEND refused "${path}: '${name}' is not in the allow-list")
  endforeach()
  if(refused)
    list(REMOVE_DUPLICATES refused)
    list(JOIN refused "\n  " report)
    list(JOIN allow " " shown)
    message(FATAL_ERROR
      "CUDA boundary: '${target}' may link only libc-only libraries named in its allow-list "
      "(${shown}; plus the C runtime and the targets built in ${own_dir}), but its link closure "
      "reaches:\n  ${report}\n"
      "If the library is libc-only and CUDA-free, add it to the ALLOW list of "
      "lease_prove_cuda_free(${target} ...).")
  endif()
  list(LENGTH libs n)
  message(STATUS "CUDA boundary: ${target} links only its allow-list (${n} items)")
endfunction()

# ---- the public functions -------------------------------------------------

# lease_assert_cuda_free(<target>): FATAL_ERROR naming every path by which
# <target> would reach a CUDA library, now and once the project is read.
function(lease_assert_cuda_free target)
  if(NOT TARGET "${target}")
    message(FATAL_ERROR "lease_assert_cuda_free: expected a target, found no target named '${target}'")
  endif()
  _lease_boundary_walk("${target}" bad libs n)
  if(bad)
    _lease_boundary_refuse("${target}" "${bad}" "")
  endif()
  message(STATUS "CUDA boundary: ${target} link closure is CUDA-free (${n} items walked)")
  _lease_boundary_schedule("${target}")
endfunction()

# lease_assert_links_only(<target> ALLOW <item>...): items are targets (an
# alias or its real name; one that does not exist yet is fine) or library
# names as -l takes them ("uring", "m").
function(lease_assert_links_only target)
  cmake_parse_arguments(A "" "" "ALLOW" ${ARGN})
  if(NOT TARGET "${target}")
    message(FATAL_ERROR "lease_assert_links_only: expected a target, found no target named '${target}'")
  endif()
  set_property(GLOBAL PROPERTY _LEASE_BOUNDARY_ALLOW_${target} "${A_ALLOW}")
  # Its own libraries are those built in the folder of this call or below,
  # however that folder is split into sub-folders.
  set_property(GLOBAL PROPERTY _LEASE_BOUNDARY_FOLDER_${target} "${CMAKE_CURRENT_SOURCE_DIR}")
  _lease_boundary_schedule("${target}")
endfunction()

# lease_prove_cuda_free(<target> [ALLOW <item>...] [IMPORTS <file>])
# Layer 2 (the walk now and at the end of configure, the allow-list when
# ALLOW is given, the link traced by linkguard) and layer 3 (linkcheck
# after every link, --strict, with IMPORTS as the allowed imports) for one
# executable or shared library. Layers 1 and 4 live with the target's code.
function(lease_prove_cuda_free target)
  cmake_parse_arguments(P "" "IMPORTS" "ALLOW" ${ARGN})
  lease_assert_cuda_free("${target}")
  if(DEFINED P_ALLOW)
    lease_assert_links_only("${target}" ALLOW ${P_ALLOW})
  endif()
  get_target_property(type "${target}" TYPE)
  if(NOT type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|MODULE_LIBRARY)$")
    return()
  endif()
  set(roots "")
  foreach(v CUDAToolkit_LIBRARY_ROOT LEASE_CUDA_ROOT)
    if(${v} AND IS_DIRECTORY "${${v}}")
      list(APPEND roots --cuda-root "${${v}}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES roots)
  # The link, traced: RULE_LAUNCH_LINK takes a plain command line.
  if(LEASE_LINKGUARD)
    list(JOIN roots " " roots_line)
    set_property(TARGET "${target}" PROPERTY RULE_LAUNCH_LINK
                 "${LEASE_LINKGUARD} --target ${target} ${roots_line} --")
    if(TARGET linkguard)
      add_dependencies("${target}" linkguard)
    endif()
  else()
    message(STATUS "CUDA boundary: ${target}'s link is not traced (no linkguard in this project)")
  endif()
  if(TARGET linkcheck)
    set(linkcheck "$<TARGET_FILE:linkcheck>")
  elseif(LEASE_LINKCHECK)
    set(linkcheck "${LEASE_LINKCHECK}")
  else()
    return()
  endif()
  set(imports "")
  if(P_IMPORTS)
    set(imports --allowed-imports "${P_IMPORTS}")
    # Editing the list relinks, so the check runs again.
    set_property(TARGET "${target}" APPEND PROPERTY LINK_DEPENDS "${P_IMPORTS}")
  endif()
  add_custom_command(TARGET "${target}" POST_BUILD
    COMMAND ${linkcheck} --strict ${roots} ${imports} "$<TARGET_FILE:${target}>"
    COMMENT "linkcheck: proving ${target} never links, loads or names CUDA"
    VERBATIM)
endfunction()
