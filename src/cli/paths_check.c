/* paths_check.c: see paths_check.h. Files are compared by inode, or by real directory and name for
 * a file not there yet, so "x" and "./x" are the same file. */
#include "cli/paths_check.h"

#include <stdio.h>
#include <string.h>

#include "data/dataset.h"
#include "io/atomic.h"
#include "io/ckpt_dir.h"
#include "sim/topology.h"

enum { N_OUTS = 6 };

typedef struct {
    const char *flag, *path;
} named_path;

static dp_status overwrites(const char *out_flag, const char *out, const char *in_flag, const char *in) {
    if (in && *in && dp_same_file(out, in))
        return dp_fail(DP_ERR_USAGE, "%s would overwrite the file given to %s ('%s')", out_flag, in_flag, out);
    return DP_OK;
}

/* each file the --predict / --topology list names (presets included: they are files too) */
static dp_status against_topologies(const char *out_flag, const char *out, const dp_config *c) {
    if (!c->predict_topos) return DP_OK;
    const char *flag = c->predict_only ? "--topology" : "--predict";
    for (const char *p = c->predict_topos; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[DP_TOPO_ITEM], path[DP_TOPO_ITEM];
        /* an item too long or empty is refused where the list is read */
        if (len && len < sizeof item) {
            memcpy(item, p, len);
            item[len] = '\0';
            if (dp_topology_file(item, path, sizeof path)) DP_TRY(overwrites(out_flag, out, flag, path));
        }
        p += len + (comma ? 1 : 0);
    }
    return DP_OK;
}

static dp_status against_data(const char *out_flag, const char *out, const dp_config *c) {
    const char *dir = c->data.dir;
    if (!dir || !*dir || strlen(dir) > 4000) return DP_OK; /* synthetic; a long name is refused by the reader */
    char name[64], path[4200];
    for (int i = 0; dp_dataset_file_name(c->data.name, i, name, sizeof name); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (dp_same_file(out, path))
            return dp_fail(DP_ERR_USAGE, "%s would overwrite a file of the %s data set in %s ('%s')", out_flag,
                           c->data.name, dir, out);
    }
    return DP_OK;
}

/* a file the checkpoint directory writes, prunes or locks: the output would be lost */
static dp_status against_checkpoints(const char *out_flag, const char *out, const named_path *ck) {
    if (!ck->path) return DP_OK;
    const char *slash = strrchr(out, '/');
    const char *base = slash ? slash + 1 : out;
    char dir[4096];
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - out) ? (int)(slash - out) : 1, out);
    else snprintf(dir, sizeof dir, ".");
    if (dp_ckpt_dir_owns(base) && dp_same_file(dir, ck->path))
        return dp_fail(DP_ERR_USAGE, "%s %s: %s %s writes, prunes or locks files of that name there; give it another "
                       "name or directory", out_flag, out, ck->flag, ck->path);
    return DP_OK;
}

dp_status dp_check_output_paths(const dp_config *c) {
    /* the checkpoint directory comes last: an input given as --resume DIR is it on purpose */
    const named_path outs[N_OUTS] = {
        {c->log_flag, c->log_path},          {"--save", c->save_path}, {"--save-profile", c->save_profile},
        {"--plot", c->plot_path},         {"--out", c->calibrate_out},
        {c->resume_path == c->checkpoint_dir ? "--resume" : "--checkpoint", c->checkpoint_dir}};
    const named_path ins[] = {{"--load", c->load_path},
                              {"--init-from", c->init_path},
                              {"--resume", c->resume_path},
                              {"--compute", c->compute_profile},
                              {"--framework", c->framework}};
    for (int i = 0; i < N_OUTS; i++) {
        const named_path *o = &outs[i];
        if (!o->path) continue;
        for (int j = i + 1; j < N_OUTS; j++)
            if (outs[j].path && dp_same_file(o->path, outs[j].path))
                return dp_fail(DP_ERR_USAGE, "%s and %s name the same %s ('%s' and '%s'); give each its own", o->flag,
                               outs[j].flag, j == N_OUTS - 1 ? "path" : "file", o->path, outs[j].path);
        if (i == N_OUTS - 1) break;
        for (size_t j = 0; j < sizeof ins / sizeof *ins; j++) DP_TRY(overwrites(o->flag, o->path, ins[j].flag, ins[j].path));
        DP_TRY(against_topologies(o->flag, o->path, c));
        DP_TRY(against_data(o->flag, o->path, c));
        DP_TRY(against_checkpoints(o->flag, o->path, &outs[N_OUTS - 1]));
    }
    return DP_OK;
}
