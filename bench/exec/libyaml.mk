# libyaml.mk — builds Debian's libyaml source tree (apt-get source libyaml: no configure script,
# and the sandbox image has no autotools or cmake) with make alone, the way its CMakeLists.txt
# does: the library, static and shared, and the test and example programs linked against it.
# Used by bench/exec/build.mjs, the same file on both sides of the comparison:
#   make -f libyaml.mk -j2
CC ?= cc
CFLAGS ?= -O2 -g -Wall
CPPFLAGS += -Iinclude -DYAML_VERSION_MAJOR=0 -DYAML_VERSION_MINOR=2 -DYAML_VERSION_PATCH=5 \
  '-DYAML_VERSION_STRING="0.2.5"'
SRC := $(wildcard src/*.c)
OBJ := $(SRC:src/%.c=build/static/%.o)
PIC := $(SRC:src/%.c=build/shared/%.o)
PROGS := $(patsubst tests/%.c,build/bin/%,$(wildcard tests/*.c))

all: build/libyaml.a build/libyaml.so $(PROGS)

build/static/%.o: src/%.c | build/static
	$(CC) $(CPPFLAGS) -DYAML_DECLARE_STATIC $(CFLAGS) -c -o $@ $<
build/shared/%.o: src/%.c | build/shared
	$(CC) $(CPPFLAGS) -DYAML_DECLARE_EXPORT $(CFLAGS) -fPIC -c -o $@ $<
build/libyaml.a: $(OBJ)
	ar rcs $@ $^
build/libyaml.so: $(PIC)
	$(CC) -shared -o $@ $^
build/bin/%: tests/%.c build/libyaml.a | build/bin
	$(CC) $(CPPFLAGS) -DYAML_DECLARE_STATIC $(CFLAGS) -o $@ $< build/libyaml.a
build/static build/shared build/bin:
	mkdir -p $@

check: all
	build/bin/test-version && build/bin/test-reader

.PHONY: all check
