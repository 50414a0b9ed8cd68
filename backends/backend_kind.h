/* backend_kind.h: what each collective backend is, in one table row (the backends' counterpart of
 * kernels/device.h's dp_dev_kind): its name, its constructor, the devices it computes on, the
 * launches it joins, whether its replicas all live in this process, and, for a build without it,
 * how to get it. The rows are listed by CMake (generated dp_backends.h, one X(name) per backend,
 * whose row is dp_<name>_backend, defined in the backend's own files); the registry (registry.c),
 * the launch check (launch_env.c) and the CLI read the rows, so no code outside a backend's own
 * files names it. */
#ifndef DP_BACKEND_KIND_H
#define DP_BACKEND_KIND_H

#include "backends/backend.h"
#include "backends/launch_env.h"

/* The device flags a run gave: --device (NULL: not given), --gpu (-1: not given), --gpus (n_gpus
 * ordinals; 0: not given). */
typedef struct {
    const char *device_flag;
    int gpu_flag;
    const int *gpus;
    int n_gpus;
} dp_device_request;

typedef struct dp_backend_kind {
    const char *name;
    int built;              /* compiled into this build; else create is NULL and how_to_get says why */
    const char *how_to_get; /* "install libopenmpi-dev openmpi-bin and rebuild" */
    const char *describe;   /* --version: what it computes on ("cpu, cuda") */
    int in_process;         /* every replica in this one process, whatever the launch (sim) */
    int takes_gpus;         /* --gpus: one process driving several GPUs */
    /* the device kind a run computes on when --device is not given (NULL: "cpu") */
    const char *default_device;
    dp_status (*create)(const dp_backend_config *cfg, dp_backend_t *out);
    /* (optional) refuses the devices it cannot compute on, and picks the ordinals (ordinals[0..*n)
       come in as --gpu or 0, one device); NULL: any device, one */
    dp_status (*devices_ok)(const dp_device_request *r, int *ordinals, int *n);
    /* (optional) whether it joins a launch of several processes (l->world > 1 or unknown) for a
       build whose MPI is fam: replicas is the launch's size or "N", mpi_cannot why the build's MPI
       cannot join it and what to do (NULL: it can); NULL: it joins any */
    dp_status (*joins_launch)(const dp_launch *l, dp_mpi_family fam, const char *replicas, const char *mpi_cannot);
} dp_backend_kind;

/* The row named name, or NULL. */
const dp_backend_kind *dp_backend_kind_find(const char *name);
/* The row that drives several GPUs in one process (takes_gpus: --gpus), or NULL. */
const dp_backend_kind *dp_backend_kind_taking_gpus(void);
/* Every backend's name, in the table's order, NULL-terminated (--backend's choices). */
extern const char *const dp_backend_names[];

#endif
