/* Loaded (LD_PRELOAD) into the snapshotting tool only (wizer or weval) while `weir-build-js`
 * builds a stage: the JavaScript engine's start-up reads entropy and the clock, and the snapshot
 * keeps what it read, so without this every build of the same stage differs (docs/languages/js.md,
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
