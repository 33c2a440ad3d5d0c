# Script mode (cmake -P): writes HEADER with the text of KERNEL_FILE as a raw
# string literal named SYMBOL.
file(READ "${KERNEL_FILE}" kernel_text)
set(delimiter "pagecheck_kernel")
string(FIND "${kernel_text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${KERNEL_FILE} contains the raw-string delimiter ${delimiter}")
endif()
file(WRITE "${HEADER}"
  "// Generated from ${KERNEL_FILE}; edit that file, not this one.\n"
  "#pragma once\n\n"
  "namespace pagecheck {\n\n"
  "inline constexpr const char* ${SYMBOL} = R\"${delimiter}(${kernel_text})${delimiter}\";\n\n"
  "} // namespace pagecheck\n")
