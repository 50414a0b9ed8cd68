/* testutil.h: helpers shared by the CMocka suites: scratch paths, writing files, running the
 * dptrain binary and capturing what it prints. */
#ifndef DP_TESTUTIL_H
#define DP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/status.h"

/* A fresh path under the test scratch directory ($DP_TEST_TMP, else /tmp): <dir>/<pid>-<name>. */
const char *tu_path(const char *name);
/* Writes n bytes to path (replacing it); fails the test on error. */
void tu_write_file(const char *path, const void *data, size_t n);
/* Writes n bytes gzip-compressed. */
void tu_write_gz(const char *path, const void *data, size_t n);
/* Runs a shell command with stdout and stderr captured into *out (malloc'd, caller frees, may be
 * NULL). Returns the exit code (or 128+signal). */
int tu_sh(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs "$DPTRAIN <args>" through /bin/sh with stdout and stderr captured into *out (malloc'd,
 * caller frees, may be NULL). Returns the exit code (or 128+signal). */
int tu_run_dptrain(char **out, const char *args_fmt, ...) __attribute__((format(printf, 2, 3)));
/* A TCP port on the loopback that was free a moment ago (bound to port 0, then closed). */
int tu_free_port(void);
/* root/<rel> with the text (replacing it); parent directories made. */
void tu_put(const char *root, const char *rel, const char *text);
/* A fresh, empty directory under the scratch directory (tu_path(name)). */
const char *tu_fresh_dir(const char *name);
/* A fresh fake root (tu_fresh_dir(name)) whose process is in the cgroup v2 group /job/step: its
 * proc/self/mountinfo and proc/self/cgroup, for the cgroup readers (core/cgroup.h). */
const char *tu_fake_cgroup_v2(const char *name);
/* 1 if GPU 0 opens (its description printed), else 0, printing why (a suite then exits 77, skipped). */
int tu_have_gpu(void);
/* 1 if haystack contains needle. */
int tu_contains(const char *haystack, const char *needle);
/* max |a-b| / max(max|b|, tiny) over n elements. */
double tu_rel_diff(const float *a, const float *b, size_t n);

/* Runs fn(arg) in a forked child (which may change its user or limits first) and returns the status
 * fn returned, with its message into msg; *maxrss_kib (may be NULL) the child's peak memory. Fails the
 * test if the child does not exit normally (fn may _exit(99) on a failed set-up). */
dp_status tu_status_in_child(dp_status (*fn)(void *), void *arg, char *msg, size_t cap, long *maxrss_kib);

/* The model tensors (F32, not optimizer.*) of a safetensors checkpoint, concatenated in file order
 * (malloc'd); *n floats. Fails the test if the file is not readable. */
float *tu_ckpt_params(const char *path, size_t *n);
/* NULL if the two checkpoints hold the same tensors (names, shapes, bytes; metadata ignored), else a
 * static message naming the first difference. */
const char *tu_ckpt_diff(const char *a, const char *b);

#endif
