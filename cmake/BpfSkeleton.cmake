# xbng_bpf_skeleton(<target> <source.bpf.c> [NAME skel] [DEPENDS hdr...] [CFLAGS flag...])
# Compiles a BPF C file with clang -target bpf -mcpu=v3 -O2 -g (BTF kept;
# v3 for the compare-and-swap of the policers, kernel >= 5.12) and runs
# `bpftool gen skeleton` on the object (skeleton name: NAME, default the
# source's, so that two builds of one source can live in one program). <target> is an INTERFACE library whose
# include directory holds <name>.skel.h; the object is embedded in the header.
find_program(BPF_CLANG NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)
find_program(LLVM_STRIP NAMES llvm-strip llvm-strip-14)

execute_process(COMMAND uname -m OUTPUT_VARIABLE XBNG_UNAME_M OUTPUT_STRIP_TRAILING_WHITESPACE)
set(XBNG_BPF_ARCH_INCLUDE /usr/include/${XBNG_UNAME_M}-linux-gnu)

function(xbng_bpf_skeleton target src)
  cmake_parse_arguments(ARG "" "NAME" "DEPENDS;CFLAGS" ${ARGN})
  get_filename_component(name ${src} NAME_WE)  # foo.bpf.c -> foo
  set(skname ${name})
  if(ARG_NAME)
    set(skname ${ARG_NAME})
  endif()
  set(outdir ${CMAKE_CURRENT_BINARY_DIR}/${target}_gen)
  set(obj ${outdir}/${name}.bpf.o)
  set(skel ${outdir}/${skname}.skel.h)
  file(MAKE_DIRECTORY ${outdir})
  file(GLOB_RECURSE abi_headers ${CMAKE_SOURCE_DIR}/include/xbng/*.h ${CMAKE_SOURCE_DIR}/bpf/lib/*.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -target bpf -mcpu=v3 -O2 -g -Wall -Werror ${ARG_CFLAGS}
            -D__TARGET_ARCH_x86
            -I${CMAKE_SOURCE_DIR}/include -I${CMAKE_SOURCE_DIR}/bpf
            -idirafter ${XBNG_BPF_ARCH_INCLUDE}
            -c ${CMAKE_CURRENT_SOURCE_DIR}/${src} -o ${obj}
    DEPENDS ${src} ${abi_headers} ${ARG_DEPENDS}
    COMMENT "BPF ${src}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${skname} > ${skel}
    DEPENDS ${obj}
    COMMENT "bpftool gen skeleton ${skname}"
    VERBATIM)
  add_custom_target(${target}_build ALL DEPENDS ${skel})
  add_library(${target} INTERFACE)
  add_dependencies(${target} ${target}_build)
  target_include_directories(${target} INTERFACE ${outdir})
  target_link_libraries(${target} INTERFACE PkgConfig::LIBBPF)
  set_property(TARGET ${target} PROPERTY XBNG_BPF_OBJECT ${obj})
endfunction()
