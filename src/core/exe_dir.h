/* exe_dir.h: where the running dptrain lies, so that files installed beside it (the presets, the
 * GPU plugin) are found wherever the build or the installation was moved. */
#ifndef DP_EXE_DIR_H
#define DP_EXE_DIR_H

#include <stddef.h>

/* The directory of the running executable into buf (n bytes); "" if it cannot be read. */
void dp_exe_dir(char *buf, size_t n);

#endif
