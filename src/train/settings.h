/* settings.h: every setting of a run, as one table (settings.c). A row is a flag with its kind,
 * range, typed default and help text, the subcommands that take it, and where its value goes: the
 * config line of the log, the settings a checkpoint records (and which of those must match to
 * resume), the flags every rank must share, and the files a companion run leaves out. The command
 * line (cli/options.c), dp_config_defaults, the log (trainer.c), checkpoints (persist.c), the
 * ranks' check (consistency.c) and predict's companion runs read this table; a new setting is one
 * row here (and its field in config.h). */
#ifndef DP_TRAIN_SETTINGS_H
#define DP_TRAIN_SETTINGS_H

#include <stddef.h>

#include "train/config.h"

typedef enum {
    DP_K_INT,     /* int field, integer range [ilo, ihi] */
    DP_K_LONG,    /* long field */
    DP_K_U64,     /* uint64_t field, integer range */
    DP_K_FLOAT,   /* float field, real range with open/closed ends */
    DP_K_DOUBLE,  /* double field */
    DP_K_INDEX,   /* int field: index of the value in choices */
    DP_K_CHOICE,  /* const char * field: one of choices */
    DP_K_STRING,  /* const char * field, anything */
    DP_K_SET,     /* no value: stores `set` into an int field */
    DP_K_SPECIAL, /* parsed by its own function in cli/options.c (`set` says which) */
} dp_setting_kind;

/* DP_K_SPECIAL rows, as their `set`. */
enum { DP_S_MODEL = 1, DP_S_DATASET, DP_S_SHAPE, DP_S_LR_STEPS, DP_S_SAVE_EVERY, DP_S_GPUS, DP_S_HELP, DP_S_VERSION };

/* The subcommands, as bits of dp_setting.cmds: a flag is accepted only by the subcommands whose
 * code reads it, so that `calibrate --device cuda` or `predict --save F` is refused, not ignored. */
enum { DP_CMD_TRAIN = 1, DP_CMD_EVAL = 2, DP_CMD_PREDICT = 4, DP_CMD_CALIBRATE = 8, DP_CMD_ALL = 15 };

/* Limits of the flags with their own parsers, shared by the parser and the help text. */
#define DP_SHAPE_MAX_C 3
#define DP_SHAPE_MAX_HW 1024
#define DP_LR_STEP_MAX 1000000

typedef struct {
    const char *name, *meta;  /* "epochs", "E" (NULL: the flag takes no value) */
    dp_setting_kind kind;
    double lo, hi;            /* numeric range */
    int lo_open, hi_open;     /* reals: the bound itself is excluded */
    long long ilo, ihi;       /* integer range (a double cannot hold 2^63-1) */
    int pow2;                 /* integers: powers of two only */
    const char *const *choices;
    size_t off;               /* offsetof(dp_config, field); DP_K_SPECIAL: 0 unless it has one */
    int set;                  /* DP_K_SET: the value stored; DP_K_SPECIAL: DP_S_* */
    double dv;                /* the default of a numeric, index or DP_K_SET field */
    const char *ds;           /* the default of a string field (DP_K_SPECIAL shape: "CxHxW") */
    const char *def;          /* the default as --help shows it, where the typed one is not it */
    const char *help;
    const char *section;      /* starts a new --help section when set */
    unsigned cmds;            /* the subcommands that read it (DP_CMD_*); any other refuses it */
    const char *key;          /* the value's name in the log (with _ for -) and checkpoints; NULL: name */
    /* where the value goes, as sort keys within each list (0: not in it); ties keep table order */
    short log;                /* the log's config line */
    short ckpt;               /* a checkpoint's settings, "dptrain.arg.<key>" */
    short cons;               /* the flags every rank must share ("with --lr 0.05") */
    unsigned char resume;     /* checkpoint: must be equal to resume (it changes the math or the data) */
    unsigned char files;      /* one of the run's own files (or its period): a companion run drops it */
    unsigned char later;      /* checkpoint: added after checkpoints were first written; one without it was
                                 written with the default, which --resume reads for the missing value */
} dp_setting;

enum { DP_SETTINGS_MAX = 96 }; /* rows at most (getopt's table is sized by it) */
extern const dp_setting dp_settings[];
extern const int dp_n_settings;

/* The lists a row's value can go to (dp_setting.log, .ckpt, .cons). */
typedef enum { DP_LIST_LOG, DP_LIST_CKPT, DP_LIST_CONS } dp_settings_list;

/* Walks one list in order. dp_settings_next returns the next row, or NULL at the end or once the
 * next row would come after the row named `through` (its key, or its flag without a key); NULL
 * through: to the end. The callers put what is not a setting between the rows this way. */
typedef struct {
    dp_settings_list list;
    int pos, idx; /* the last row returned (0, -1: none yet) */
} dp_settings_cursor;
#define DP_SETTINGS_CURSOR(l) ((dp_settings_cursor){.list = (l), .pos = 0, .idx = -1})
const dp_setting *dp_settings_next(dp_settings_cursor *cur, const char *through);
int dp_setting_pos(const dp_setting *s, dp_settings_list list);
const char *dp_setting_key(const dp_setting *s);

/* A row's value in c, typed for the log; s points into buf for composed values (the shape, the
 * --lr-steps list), so the struct is not to be copied. */
typedef struct {
    enum { DP_SV_INT, DP_SV_UINT, DP_SV_REAL, DP_SV_STR } type;
    long long i;
    unsigned long long u;
    double r;
    const char *s;
    char buf[128];
} dp_setting_value;
void dp_setting_get(const dp_setting *s, const dp_config *c, dp_setting_value *v);
/* Whether a flag without a value (DP_K_SET) or a list (--lr-steps) is in effect in c. */
int dp_setting_given(const dp_setting *s, const dp_config *c);
/* The value as text: integers as %lld / %llu, reals with %.9g (a float read back exactly). */
void dp_setting_text(const dp_setting *s, const dp_config *c, char *buf, size_t cap);

/* The default as --help states it ("" when it states none). */
void dp_setting_default_text(const dp_setting *s, char *buf, size_t cap);

/* Clears the rows marked `files` in c: a companion run (predict's overhead timing) writes and
 * reads none of the run's own files. */
void dp_settings_drop_files(dp_config *c);

#endif
