/* Loaded (LD_PRELOAD) into the snapshotting tool only while a stage is built: wizer or weval for
 * `weir-build-js`, componentize-py for `weir-build-python` (with WEIR_FIXED_FILE_TIMES=1, below).
 * The engine's start-up reads entropy and the clock, and the snapshot keeps what it read, so
 * without this every build of the same stage differs (docs/languages/js.md and python.md,
 * "Reproducible builds"). Entropy becomes a fixed stream, and the clock reads SOURCE_DATE_EPOCH
 * (default 2026-01-01). The running stage is not affected: at run time the host gives it real
 * entropy and the real time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

static void fixed_bytes(void *buf, size_t len) {
  unsigned char *p = buf;
  uint64_t s = 0x9E3779B97F4A7C15ull; /* every call gets the same stream: threads cannot reorder it */
  for (size_t i = 0; i < len; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = (unsigned char)s;
  }
}

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
  (void)flags;
  fixed_bytes(buf, len);
  return (ssize_t)len;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  (void)id;
  const char *epoch = getenv("SOURCE_DATE_EPOCH");
  ts->tv_sec = epoch ? (time_t)atoll(epoch) : 1767225600;
  ts->tv_nsec = 0;
  return 0;
}

/* Rust's getrandom crate calls the syscall directly when libc's wrapper is not linked. */
long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  if (n == SYS_getrandom) {
    fixed_bytes((void *)a[0], (size_t)a[1]);
    return a[1];
  }
  static long (*real)(long, ...) = 0;
  if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* File times, fixed, for componentize-py (asked for with WEIR_FIXED_FILE_TIMES=1). It snapshots
 * CPython after the stage's imports, and what the snapshot keeps depends on the files' times and
 * inode numbers: the import system's caches hold folder times, and stat buffers left on the
 * guest's stack hold times and inodes. componentize-py writes some of those files (the standard
 * library, the generated bindings) at build time, and its embedded wasmtime asks with raw
 * `statx` calls, which no LD_PRELOAD reaches. So a seccomp filter traps the stat family (SIGSYS);
 * the handler makes the call itself, from the one instruction the filter lets through, and
 * writes SOURCE_DATE_EPOCH into every time of the answer, and inode 1 into `statx` answers (only
 * those: the dynamic loader tells libraries apart by inode, and it asks with fstat). The filter
 * outlives an exec while the handler does not, so only a process that starts nothing else may
 * ask for this. x86-64 Linux only; elsewhere it says so. */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__x86_64__)
/* weir_raw_call(n, a, b, c, d, e, f): system call n, made from the one instruction the filter does
 * not trap (the kernel reports the address after it, weir_raw_call_end). */
long weir_raw_call(long n, long a, long b, long c, long d, long e, long f);
extern char weir_raw_call_end[];
__asm__(".text\n"
        ".globl weir_raw_call\n.hidden weir_raw_call\n.type weir_raw_call,@function\n"
        "weir_raw_call:\n"
        "  mov %rdi, %rax\n  mov %rsi, %rdi\n  mov %rdx, %rsi\n  mov %rcx, %rdx\n"
        "  mov %r8, %r10\n  mov %r9, %r8\n  mov 8(%rsp), %r9\n"
        "  syscall\n"
        ".globl weir_raw_call_end\n.hidden weir_raw_call_end\n"
        "weir_raw_call_end:\n"
        "  ret\n");

static long fixed_epoch;

static void fix_timespec(struct timespec *t) {
  t->tv_sec = fixed_epoch;
  t->tv_nsec = 0;
}

static void fix_statx_time(struct statx_timestamp *t) {
  t->tv_sec = fixed_epoch;
  t->tv_nsec = 0;
}

static void on_sigsys(int sig, siginfo_t *info, void *context) {
  (void)sig;
  greg_t *r = ((ucontext_t *)context)->uc_mcontext.gregs;
  long n = info->si_syscall;
  long a[6] = {r[REG_RDI], r[REG_RSI], r[REG_RDX], r[REG_R10], r[REG_R8], r[REG_R9]};
  long ret = weir_raw_call(n, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (ret == 0) {
    struct stat *st = 0;
    if (n == SYS_stat || n == SYS_fstat || n == SYS_lstat) st = (struct stat *)a[1];
    if (n == SYS_newfstatat) st = (struct stat *)a[2];
    if (st) {
      fix_timespec(&st->st_atim);
      fix_timespec(&st->st_mtim);
      fix_timespec(&st->st_ctim);
    }
    if (n == SYS_statx) {
      struct statx *sx = (struct statx *)a[4];
      sx->stx_ino = 1;
      fix_statx_time(&sx->stx_atime);
      fix_statx_time(&sx->stx_btime);
      fix_statx_time(&sx->stx_ctime);
      fix_statx_time(&sx->stx_mtime);
    }
  }
  r[REG_RAX] = ret;
}

__attribute__((constructor)) static void fixed_file_times(void) {
  const char *on = getenv("WEIR_FIXED_FILE_TIMES");
  if (!on || strcmp(on, "1") != 0) return;
  const char *epoch = getenv("SOURCE_DATE_EPOCH");
  fixed_epoch = epoch ? atol(epoch) : 1767225600;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  uint64_t from = (uint64_t)(uintptr_t)weir_raw_call_end;
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_stat, 5, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fstat, 4, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_lstat, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_newfstatat, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_statx, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, instruction_pointer)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)from, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, instruction_pointer) + 4),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(from >> 32), 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
  long failed = -1;
  if (sigaction(SIGSYS, &sa, 0) == 0 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)
    failed = weir_raw_call(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)&prog, 0, 0, 0);
  if (failed != 0)
    fprintf(stderr, "reproducible.c: cannot fix file times (seccomp refused: %ld): this build is not reproducible\n", failed);
}
#else
__attribute__((constructor)) static void fixed_file_times(void) {
  const char *on = getenv("WEIR_FIXED_FILE_TIMES");
  if (on && strcmp(on, "1") == 0)
    fprintf(stderr, "reproducible.c: file times are fixed on x86-64 Linux only: this build is not reproducible\n");
}
#endif
