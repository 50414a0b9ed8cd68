/* device.h: the device seam moved to kernels/device.h, next to the kernel table it names. This
 * header only forwards there, for sim/ring.h and sim/sim_backend.c until sim/ is reorganised (the
 * one arrow from src/core/ upward: tests/include_arrows.sh lists it); new code includes
 * kernels/device.h. */
#include "kernels/device.h"
