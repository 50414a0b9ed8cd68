/* seed_files.h: a fuzz target's seeds read from files of the source tree (sim/presets), so the
 * seeds are what ships and follow its format. */
#ifndef DP_FUZZ_SEED_FILES_H
#define DP_FUZZ_SEED_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Hands dir/name to add; a file that cannot be read is skipped (the hand-written seeds remain). */
static inline void dp_fuzz_seed_file(void (*add)(const uint8_t *, size_t), const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    add(buf, n);
}

#endif
