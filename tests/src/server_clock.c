/*
 * The wall clock of a store's server, moved by the fault harness.
 *
 * Preloaded into a server (LD_PRELOAD), this library defines
 * clock_gettime, gettimeofday and time: each reads the kernel's clock with
 * a raw system call and, for the wall clock only (CLOCK_REALTIME and
 * CLOCK_REALTIME_COARSE), adds an offset in milliseconds. Monotonic and
 * CPU-time clocks pass through untouched, and whatever a server times by
 * them keeps the real pace: only its idea of the date moves.
 *
 * The offset lives in a control file named by LOCK_TESTS_SERVER_CLOCK,
 * written by the harness (tests/src/server_clock.rs) and mapped here once,
 * read-only and shared, on the first clock read: a change is seen by the
 * next read, without a system call per read. Without the variable, or
 * with a file that cannot be opened or mapped, the offset is 0.
 *
 * The file holds 16 bytes in native byte order: the offset (int64_t) and
 * its check, mix(offset) (uint64_t). The harness rewrites both with one
 * pwrite, which the kernel need not copy atomically: a read that meets a
 * half-written record sees a check that does not match and reads again.
 *
 * Nothing here allocates, takes a lock or calls back into the clock
 * functions it replaces: a server whose allocator reads the clock while
 * it initializes (jemalloc) must not recurse into it.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define CONTROL_VARIABLE "LOCK_TESTS_SERVER_CLOCK"

struct control {
    int64_t offset_ms;
    uint64_t check;
};

/* Stands for "no control file": offset 0. */
static const struct control absent = {0, 0};

/* The mapped control file, &absent, or NULL before the first read. */
static const struct control *mapped;

/* The check of an offset (splitmix64's finalizer): a record mixed from
 * two writes fails it. server_clock.rs computes the same. */
static uint64_t mix(int64_t offset_ms)
{
    uint64_t z = (uint64_t)offset_ms ^ 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Maps the control file (once per process: a thread that loses the race
 * unmaps its own mapping) and returns it, or &absent. Leaves errno as it
 * found it. */
static const struct control *map_control(void)
{
    int saved = errno;
    const struct control *found = &absent;
    const char *path = getenv(CONTROL_VARIABLE);
    if (path != NULL && path[0] != '\0') {
        long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            /* Mapping past the end of a shorter file would fault on read. */
            long size = syscall(SYS_lseek, fd, 0L, SEEK_END);
            if (size >= (long)sizeof(struct control)) {
                long address = syscall(SYS_mmap, NULL, sizeof(struct control), PROT_READ,
                                       MAP_SHARED, fd, 0L);
                if (address != -1) {
                    found = (const struct control *)address;
                }
            }
            syscall(SYS_close, fd);
        }
    }
    const struct control *expected = NULL;
    if (!__atomic_compare_exchange_n(&mapped, &expected, found, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        if (found != &absent) {
            syscall(SYS_munmap, found, sizeof(struct control));
        }
        found = expected;
    }
    errno = saved;
    return found;
}

/* The offset now. A record caught mid-write is read again (spinning, then
 * yielding the processor); one that never checks out (a file not written
 * by the harness) counts as 0. */
static int64_t offset_ms(void)
{
    const struct control *control = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);
    if (control == NULL) {
        control = map_control();
    }
    if (control == &absent) {
        return 0;
    }
    for (int attempt = 0; attempt < 200; attempt++) {
        int64_t offset = __atomic_load_n(&control->offset_ms, __ATOMIC_ACQUIRE);
        uint64_t check = __atomic_load_n(&control->check, __ATOMIC_ACQUIRE);
        if (check == mix(offset)) {
            return offset;
        }
        if (attempt >= 100) {
            int saved = errno;
            syscall(SYS_sched_yield);
            errno = saved;
        }
    }
    return 0;
}

static int is_wall_clock(clockid_t clock)
{
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE;
}

/* Moves `seconds` and `fraction` (in units of which `per_second` make a
 * second) by `offset` milliseconds, keeping 0 <= fraction < per_second. */
static void shift(int64_t *seconds, int64_t *fraction, int64_t per_second, int64_t offset)
{
    *seconds += offset / 1000;
    *fraction += (offset % 1000) * (per_second / 1000);
    if (*fraction < 0) {
        *fraction += per_second;
        *seconds -= 1;
    } else if (*fraction >= per_second) {
        *fraction -= per_second;
        *seconds += 1;
    }
}

/* The kernel's reading of `clock`, moved by the offset for a wall clock. */
static int read_clock(clockid_t clock, struct timespec *now)
{
    if (syscall(SYS_clock_gettime, clock, now) != 0) {
        return -1;
    }
    if (is_wall_clock(clock)) {
        int64_t offset = offset_ms();
        if (offset != 0) {
            int64_t seconds = now->tv_sec;
            int64_t nanoseconds = now->tv_nsec;
            shift(&seconds, &nanoseconds, 1000000000, offset);
            now->tv_sec = (time_t)seconds;
            now->tv_nsec = (long)nanoseconds;
        }
    }
    return 0;
}

int clock_gettime(clockid_t clock, struct timespec *now)
{
    return read_clock(clock, now);
}

int gettimeofday(struct timeval *restrict now, void *restrict zone)
{
    if (syscall(SYS_gettimeofday, now, zone) != 0) {
        return -1;
    }
    /* The C library declares `now` nonnull, so the compiler may drop a
     * check of it; but the kernel accepts NULL there (only the zone is
     * wanted). The empty asm hides where the pointer came from. */
    struct timeval *time_of_day = now;
    __asm__("" : "+r"(time_of_day));
    if (time_of_day != NULL) {
        int64_t offset = offset_ms();
        if (offset != 0) {
            int64_t seconds = time_of_day->tv_sec;
            int64_t microseconds = time_of_day->tv_usec;
            shift(&seconds, &microseconds, 1000000, offset);
            time_of_day->tv_sec = (time_t)seconds;
            time_of_day->tv_usec = (suseconds_t)microseconds;
        }
    }
    return 0;
}

time_t time(time_t *out)
{
    struct timespec now;
    if (read_clock(CLOCK_REALTIME, &now) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = now.tv_sec;
    }
    return now.tv_sec;
}
