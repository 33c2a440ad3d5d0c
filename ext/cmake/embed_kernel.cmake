# pagecheck_embed_kernel(<target> <kernel file> <C++ symbol>)
#
# Turns a GPU kernel body in ext/kernels/ into a generated header
# "<kernel name>_source.h" holding `inline constexpr const char* <symbol>`, so
# the module carries its kernel sources and needs no files at run time. The
# header is regenerated whenever the kernel file changes.
function(pagecheck_embed_kernel target kernel_file symbol)
  get_filename_component(kernel_name "${kernel_file}" NAME_WE)
  set(generated_dir "${CMAKE_CURRENT_BINARY_DIR}/generated")
  set(header "${generated_dir}/${kernel_name}_source.h")
  add_custom_command(
    OUTPUT "${header}"
    COMMAND ${CMAKE_COMMAND} -DKERNEL_FILE=${kernel_file} -DHEADER=${header} -DSYMBOL=${symbol}
            -P "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/write_kernel_header.cmake"
    DEPENDS "${kernel_file}" "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/write_kernel_header.cmake"
    COMMENT "Embedding GPU kernel ${kernel_name}")
  target_sources(${target} PRIVATE "${header}")
  target_include_directories(${target} PRIVATE "${generated_dir}")
endfunction()
