/* Linked into every extension the farm builds (build.sh puts its object on LDFLAGS), so a wheel built on a
 * newer glibc keeps the manylinux floor its spec promises.
 *
 * GCC >= 11's libstdc++ headers read glibc's __libc_single_threaded (GLIBC_2.32) wherever they count
 * references (shared_ptr, std::string, locale: ext/atomicity.h's __is_single_threaded) once
 * <sys/single_threaded.h> exists, which puts that one symbol above manylinux_2_28 in every C++ extension
 * built on a glibc >= 2.32 base. This hidden definition binds those reads inside the extension instead.
 * 0 means "maybe multi-threaded": the headers then always take their atomic path, which is correct in any
 * process (the flag is only a shortcut for processes that never started a thread), so no result changes. */
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
