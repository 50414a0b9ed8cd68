/* kdef.h: walkers over an entry's argument tuples in kernels/kernels.def, one per thing a file
 * generates from them: DP_KDEF_PROTO(items) the parameters (", const float *x, ..."),
 * DP_KDEF_PACK(items) the statements that store them in a dp_kcall *kcall, DP_KDEF_UNPACK(items) the
 * arguments read back from one, DP_KDEF_VOID(items) "(void)x;" for each, DP_KDEF_NPTR(items) how
 * many pointers (a constant). Each walker is a pair of macros that call each other once per tuple,
 * the preprocessor's way of looping over a sequence; DP_KDEF_EACH pastes _END on the last
 * one's name, which closes it. */
#ifndef DP_KDEF_H
#define DP_KDEF_H

#include <stdint.h>

/* the comma between arguments, held back (DP_KDEF_COMMA_ DP_KDEF_NIL() () is left as
 * DP_KDEF_COMMA_ () by the walk and becomes a comma only after DP_KDEF_CAT pasted _END on) */
#define DP_KDEF_NIL()
#define DP_KDEF_COMMA_() ,
#define DP_KDEF_COMMA DP_KDEF_COMMA_ DP_KDEF_NIL() ()
#define DP_KDEF_CAT_(a, b) a##b
#define DP_KDEF_CAT(a, b) DP_KDEF_CAT_(a, b)
#define DP_KDEF_EACH(walker, items) DP_KDEF_CAT(walker##_A items, _END)

#define DP_KDEF_PROTO(items) DP_KDEF_EACH(DP_KDEF_PROTO, items)
#define DP_KDEF_PROTO_A(kind, ...) DP_KDEF_PROTO_##kind(__VA_ARGS__) DP_KDEF_PROTO_B
#define DP_KDEF_PROTO_B(kind, ...) DP_KDEF_PROTO_##kind(__VA_ARGS__) DP_KDEF_PROTO_A
#define DP_KDEF_PROTO_A_END
#define DP_KDEF_PROTO_B_END
#define DP_KDEF_PROTO_dims(name) DP_KDEF_COMMA const dp_conv2d_dims *name
#define DP_KDEF_PROTO_int(j, name) DP_KDEF_COMMA int name
#define DP_KDEF_PROTO_size_t(name) DP_KDEF_COMMA size_t name
#define DP_KDEF_PROTO_float(j, name) DP_KDEF_COMMA float name
#define DP_KDEF_PROTO_double(name) DP_KDEF_COMMA double name
#define DP_KDEF_PROTO_ptr(j, type, name, bytes) DP_KDEF_COMMA type name

#define DP_KDEF_PACK(items) DP_KDEF_EACH(DP_KDEF_PACK, items)
#define DP_KDEF_PACK_A(kind, ...) DP_KDEF_PACK_##kind(__VA_ARGS__) DP_KDEF_PACK_B
#define DP_KDEF_PACK_B(kind, ...) DP_KDEF_PACK_##kind(__VA_ARGS__) DP_KDEF_PACK_A
#define DP_KDEF_PACK_A_END
#define DP_KDEF_PACK_B_END
#define DP_KDEF_PACK_dims(name) kcall->dims = *name;
#define DP_KDEF_PACK_int(j, name) kcall->i[j] = name;
#define DP_KDEF_PACK_size_t(name) kcall->z = name;
#define DP_KDEF_PACK_float(j, name) kcall->f[j] = name;
#define DP_KDEF_PACK_double(name) kcall->count = name;
#define DP_KDEF_PACK_ptr(j, type, name, bytes) kcall->p[j] = (void *)(uintptr_t)(name);

#define DP_KDEF_UNPACK(items) DP_KDEF_EACH(DP_KDEF_UNPACK, items)
#define DP_KDEF_UNPACK_A(kind, ...) DP_KDEF_UNPACK_##kind(__VA_ARGS__) DP_KDEF_UNPACK_B
#define DP_KDEF_UNPACK_B(kind, ...) DP_KDEF_UNPACK_##kind(__VA_ARGS__) DP_KDEF_UNPACK_A
#define DP_KDEF_UNPACK_A_END
#define DP_KDEF_UNPACK_B_END
#define DP_KDEF_UNPACK_dims(name) DP_KDEF_COMMA &kcall->dims
#define DP_KDEF_UNPACK_int(j, name) DP_KDEF_COMMA kcall->i[j]
#define DP_KDEF_UNPACK_size_t(name) DP_KDEF_COMMA kcall->z
#define DP_KDEF_UNPACK_float(j, name) DP_KDEF_COMMA kcall->f[j]
#define DP_KDEF_UNPACK_double(name) DP_KDEF_COMMA kcall->count
#define DP_KDEF_UNPACK_ptr(j, type, name, bytes) DP_KDEF_COMMA (type)kcall->p[j]

#define DP_KDEF_VOID(items) DP_KDEF_EACH(DP_KDEF_VOID, items)
#define DP_KDEF_VOID_A(kind, ...) DP_KDEF_VOID_##kind(__VA_ARGS__) DP_KDEF_VOID_B
#define DP_KDEF_VOID_B(kind, ...) DP_KDEF_VOID_##kind(__VA_ARGS__) DP_KDEF_VOID_A
#define DP_KDEF_VOID_A_END
#define DP_KDEF_VOID_B_END
#define DP_KDEF_VOID_dims(name) (void)name;
#define DP_KDEF_VOID_int(j, name) (void)name;
#define DP_KDEF_VOID_size_t(name) (void)name;
#define DP_KDEF_VOID_float(j, name) (void)name;
#define DP_KDEF_VOID_double(name) (void)name;
#define DP_KDEF_VOID_ptr(j, type, name, bytes) (void)name;

#define DP_KDEF_NPTR(items) (0 DP_KDEF_EACH(DP_KDEF_NPTR, items))
#define DP_KDEF_NPTR_A(kind, ...) DP_KDEF_NPTR_##kind(__VA_ARGS__) DP_KDEF_NPTR_B
#define DP_KDEF_NPTR_B(kind, ...) DP_KDEF_NPTR_##kind(__VA_ARGS__) DP_KDEF_NPTR_A
#define DP_KDEF_NPTR_A_END
#define DP_KDEF_NPTR_B_END
#define DP_KDEF_NPTR_dims(name)
#define DP_KDEF_NPTR_int(j, name)
#define DP_KDEF_NPTR_size_t(name)
#define DP_KDEF_NPTR_float(j, name)
#define DP_KDEF_NPTR_double(name)
#define DP_KDEF_NPTR_ptr(j, type, name, bytes) +1

#endif
