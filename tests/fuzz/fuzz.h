/* fuzz.h: what a fuzz target in tests/fuzz/ provides. Each target is a libFuzzer entry point
 * (built with clang -fsanitize=fuzzer under -DDP_FUZZ=ON) and, through driver.c, a short smoke
 * run that CI executes with every build (ASan/UBSan in the sanitized one): its seeds, then random
 * mutations of them for a few seconds. */
#ifndef DP_FUZZ_H
#define DP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Hands the target's seed inputs to add (valid files, so that mutations reach deep). */
void dp_fuzz_seeds(void (*add)(const uint8_t *data, size_t size));

#endif
