// fibers.cc: a grid run on the CPU. Blocks run one after another on the calling thread (a
// stream's worker); a block's threads run as fibers of that thread, one at a time,
// each until it finishes or reaches __syncthreads; when every live thread of the block waits
// there, they all go on. A fiber whose thread finished takes the block's next thread, so a
// kernel without barriers runs on one fiber stack. Under AddressSanitizer every switch is
// announced to it (__sanitizer_start/finish_switch_fiber), as it requires. On x86-64 a fiber
// switch is six pushes and pops (dp_shim_switch below); swapcontext, elsewhere, also saves the
// signal mask with a system call each time, which made the suites several times slower.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <vector>

#include "shim.h"

#if defined(__SANITIZE_ADDRESS__)
#define DP_SHIM_ASAN 1
#include <sanitizer/common_interface_defs.h>
#else
#define DP_SHIM_ASAN 0
#endif

thread_local dp_shim_coords dp_shim_here;

namespace {

enum { RUNNING, AT_BARRIER, FINISHED };

// ASan's instrumented frames are several times larger
constexpr size_t STACK_BYTES = (DP_SHIM_ASAN ? 512 : 128) << 10;

#if defined(__x86_64__)
// Saves the callee-saved registers and the FP control words on the current stack, stores its
// pointer in *from, and resumes the stack `to` saved (or one new_context prepared).
extern "C" void dp_shim_switch(void **from, void *to);
asm(R"(
    .text
    .globl dp_shim_switch
    .type dp_shim_switch, @function
dp_shim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size dp_shim_switch, .-dp_shim_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");
struct Context {
    void *sp = nullptr;
};
void switch_to(Context *from, Context *to) { dp_shim_switch(&from->sp, to->sp); }
// A stack whose first switch "returns" into entry with the alignment of a call.
void new_context(Context *c, char *stack, size_t bytes, void (*entry)()) {
    uintptr_t top = ((uintptr_t)(stack + bytes)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;         // entry's return address: it never returns
    *--sp = (void *)entry;   // dp_shim_switch's ret goes here
    for (int i = 0; i < 6; i++) *--sp = nullptr; // rbp rbx r12-r15
    --sp;
    unsigned csr[2];
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    memcpy(sp, csr, sizeof csr);
    c->sp = sp;
}
#else
struct Context {
    ucontext_t uc;
};
void switch_to(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }
void new_context(Context *c, char *stack, size_t bytes, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif

struct Fiber {
    Context uc;
    char *stack = nullptr; // mmap'd, its lowest page a guard
    int state = RUNNING, pred = 0;
    uint3 thread{0, 0, 0};
    void *fake = nullptr; // ASan's fake stack of this fiber while it is switched out
};

struct Sched {
    Context uc;
    std::vector<Fiber *> all, free, waiting, next;
    const std::function<void()> *body = nullptr;
    Fiber *cur = nullptr;
    int any = 0; // __syncthreads_or's result for the threads it releases
    const void *host_bottom = nullptr; // the worker's own stack (ASan)
    size_t host_size = 0;
    void *host_fake = nullptr;
    ~Sched() {
        for (Fiber *f : all) munmap(f->stack, STACK_BYTES), delete f;
    }
};
thread_local Sched sched;

void to_scheduler(Fiber *f) {
#if DP_SHIM_ASAN
    __sanitizer_start_switch_fiber(&f->fake, sched.host_bottom, sched.host_size);
#endif
    switch_to(&f->uc, &sched.uc);
#if DP_SHIM_ASAN
    __sanitizer_finish_switch_fiber(f->fake, nullptr, nullptr);
#endif
}

void fiber_main() {
#if DP_SHIM_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched.host_bottom, &sched.host_size);
#endif
    for (;;) { // one thread of a block each time round; never returns
        Fiber *f = sched.cur;
        (*sched.body)();
        f->state = FINISHED;
        to_scheduler(f);
    }
}

Fiber *new_fiber() {
    Fiber *f = new Fiber;
    void *m = mmap(nullptr, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "cudashim: cannot map a fiber's stack\n");
        abort();
    }
    f->stack = (char *)m;
    mprotect(f->stack, 4096, PROT_NONE); // an overflow faults instead of writing into another stack
    new_context(&f->uc, f->stack, STACK_BYTES, fiber_main);
    sched.all.push_back(f);
    return f;
}

// Runs f's thread until it finishes or waits at a barrier; files it as free or waiting.
void resume(Fiber *f) {
    sched.cur = f;
    dp_shim_here.thread = f->thread;
    f->state = RUNNING;
#if DP_SHIM_ASAN
    __sanitizer_start_switch_fiber(&sched.host_fake, f->stack, STACK_BYTES);
#endif
    switch_to(&sched.uc, &f->uc);
#if DP_SHIM_ASAN
    __sanitizer_finish_switch_fiber(sched.host_fake, nullptr, nullptr);
#endif
    sched.cur = nullptr;
    if (f->state == AT_BARRIER) sched.next.push_back(f);
    else sched.free.push_back(f);
}

void run_block(unsigned n, dim3 block) {
    sched.waiting.clear();
    unsigned started = 0;
    for (;;) {
        sched.next.clear();
        for (Fiber *f : sched.waiting) resume(f); // from the last barrier to the next
        while (started < n) { // the block's threads not begun yet (the first round only)
            Fiber *f;
            if (sched.free.empty()) f = new_fiber();
            else f = sched.free.back(), sched.free.pop_back();
            const unsigned i = started++;
            f->thread = uint3{i % block.x, i / block.x % block.y, i / (block.x * block.y)};
            resume(f);
        }
        if (sched.next.empty()) return;
        // every thread still running waits at the barrier (those that returned count as there)
        int any = 0;
        for (Fiber *f : sched.next) any |= f->pred;
        sched.any = any;
        sched.waiting.swap(sched.next);
    }
}

int barrier(int pred) {
    Fiber *f = sched.cur;
    if (!f) {
        fprintf(stderr, "cudashim: __syncthreads outside a kernel\n");
        abort();
    }
    f->pred = pred != 0;
    f->state = AT_BARRIER;
    to_scheduler(f);
    return sched.any;
}

} // namespace

void dp_shim_syncthreads(void) { barrier(0); }
int dp_shim_syncthreads_or(int pred) { return barrier(pred); }

namespace dpshim {

void run_grid(dim3 grid, dim3 block, const std::function<void()> &body) {
    sched.body = &body;
    dp_shim_here.block_dim = uint3{block.x, block.y, block.z};
    dp_shim_here.grid_dim = uint3{grid.x, grid.y, grid.z};
    const unsigned n = block.x * block.y * block.z;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                dp_shim_here.block = uint3{x, y, z};
                run_block(n, block);
            }
    sched.body = nullptr;
}

} // namespace dpshim
