# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P EmbedFile.cmake
# Writes OUT, a C file defining `const unsigned char NAME[]` with IN's bytes
# (plus a NUL after them, not counted) and `const size_t NAME_len`, so a
# plugin carries a file (the /ui page) with nothing beside it to install.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){24})" "\\1\n" body "${body}")
file(WRITE "${OUT}.tmp"
  "/* generated from ${IN} by EmbedFile.cmake: do not edit */\n"
  "#include <stddef.h>\n"
  "const unsigned char ${NAME}[] = {\n${body}0x00};\n"
  "const size_t ${NAME}_len = ${bytes};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
