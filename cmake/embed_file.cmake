# Writes a C file defining `const unsigned char NAME[]` (the bytes of IN, NUL-terminated) and
# `const size_t NAME_len` (without the NUL). Usage: cmake -DIN=… -DOUT=… -DNAME=… -P embed_file.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN}; do not edit */\n#include <stddef.h>\n"
  "const unsigned char ${NAME}[] = {${bytes}0x00};\nconst size_t ${NAME}_len = ${len};\n")
