/* elf_whole.c: see elf_whole.h. */
#include "core/elf_whole.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* [off, off + len) lies inside a file of size bytes, without overflow */
static int inside(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

static int short_file(char *why, size_t cap, uint64_t size, const char *what, uint64_t end) {
    snprintf(why, cap, "the file is cut short: %llu bytes, but its %s reach byte %llu (an interrupted copy?)",
             (unsigned long long)size, what, (unsigned long long)end);
    return -1;
}

int dp_elf_whole(const char *path, char *why, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return snprintf(why, cap, "cannot open it: %s", strerror(errno)), -1;
    struct stat st;
    Elf64_Ehdr eh;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -1, snprintf(why, cap, "cannot read its size: %s", strerror(errno));
        goto out;
    }
    const uint64_t size = (uint64_t)st.st_size;
    /* not a 64-bit little-endian ELF file (text, a 32-bit library...): dlopen gives the reason */
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
        goto out;
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || !inside(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), size)) {
        rc = short_file(why, cap, size, "program headers", eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize);
        goto out;
    }
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph)) != (ssize_t)sizeof ph) {
            rc = -1, snprintf(why, cap, "cannot read program header %u: %s", i, strerror(errno ? errno : EIO));
            goto out;
        }
        if (ph.p_type == PT_LOAD && !inside(ph.p_offset, ph.p_filesz, size)) {
            rc = short_file(why, cap, size, "loaded segments", ph.p_offset + ph.p_filesz);
            goto out;
        }
    }
    /* the section headers sit at the end of a linker's output: a cut anywhere shows here too */
    if (eh.e_shoff && !inside(eh.e_shoff, (uint64_t)eh.e_shnum * eh.e_shentsize, size))
        rc = short_file(why, cap, size, "section headers", eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize);
out:
    close(fd);
    return rc;
}
