/* elf_whole.h: whether a shared library file holds every byte its ELF headers describe. The
 * dynamic loader maps a library's segments as the headers say; a file cut short (a copy
 * interrupted by a full disk, a partial sync) maps pages past its end, and the first touch of one
 * kills the process with SIGBUS before dlopen can return an error. Checked before dlopen. */
#ifndef DP_ELF_WHOLE_H
#define DP_ELF_WHOLE_H

#include <stddef.h>

/* 0 when the file at path is a complete 64-bit ELF file, or is no ELF file of this machine's kind
 * at all (dlopen then says why it refuses it); -1 with the reason in why (cap bytes) when it is
 * shorter than its headers say or cannot be read. */
int dp_elf_whole(const char *path, char *why, size_t cap);

#endif
