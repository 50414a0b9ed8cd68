/* kdef_table.h: the entries of a dp_kernels initializer, in kernels.def's order, each the function
 * DP_KDEF_PREFIX<name> (a missing one does not compile, or link). Include it inside the braces,
 * after the device's name, with DP_KDEF_PREFIX defined; not a header: it may be included often. */
#define DP_KDEF_ENTRY_(name) DP_KDEF_CAT(DP_KDEF_PREFIX, name),
#define DP_KERNEL_SIZE(name, params, args) DP_KDEF_ENTRY_(name)
#define DP_KERNEL_LAYER(name, KIND, items) DP_KDEF_ENTRY_(name)
#define DP_KERNEL_CALL(name, KIND, items) DP_KDEF_ENTRY_(name)
#define DP_KERNEL_OWN(name, params) DP_KDEF_ENTRY_(name)
#include "kernels/kernels.def"
#undef DP_KDEF_ENTRY_
#undef DP_KDEF_PREFIX
