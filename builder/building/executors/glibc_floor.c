/* Linked into every extension the farm builds (build.sh puts its object on LDFLAGS), so a wheel built on a
 * newer glibc keeps the manylinux floor its spec promises. Each definition here is hidden: it binds the
 * extension's own references, and nothing else in the process sees it.
 *
 * GCC >= 11's libstdc++ headers read glibc's __libc_single_threaded (GLIBC_2.32) wherever they count
 * references (shared_ptr, std::string, locale: ext/atomicity.h's __is_single_threaded) once
 * <sys/single_threaded.h> exists, which puts that one symbol above manylinux_2_28 in every C++ extension
 * built on a glibc >= 2.32 base. 0 means "maybe multi-threaded": the headers then always take their atomic
 * path, which is correct in any process (the flag is only a shortcut for processes that never started a
 * thread), so no result changes. */
#include <features.h>

__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

/* glibc 2.34 moved dlsym from libdl into libc under a new version, GLIBC_2.34, and torch >= 2.14's stable-ABI
 * headers call dlsym(RTLD_DEFAULT, ...) (torch/csrc/stable/macros.h). This dlsym calls the symbol's first
 * version instead: the same function, which libc >= 2.34 still exports under it and which an older glibc's
 * libdl.so.2 defines (torch's libraries and CPython load it there). */
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
#if defined(__x86_64__)
#define FLOOR_FIRST_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define FLOOR_FIRST_VERSION "GLIBC_2.17"
#endif
#ifdef FLOOR_FIRST_VERSION
__asm__(".symver floor_dlsym_first, dlsym@" FLOOR_FIRST_VERSION);
extern void *floor_dlsym_first(void *handle, const char *name);

__attribute__((visibility("hidden"))) void *dlsym(void *handle, const char *name) {
  return floor_dlsym_first(handle, name);
}
#endif
#endif
