// Lets libnccl-net-tenantqos.so load on glibc 2.28 (RHEL 8; Ubuntu 20.04 has 2.31) although it
// is built on a newer one (Debian 12: 2.36). Linked into the shared object only.
//
// Why this is needed: glibc gives a symbol a new version when it moves or changes (2.34 moved
// libpthread and libdl into libc: pthread_create@GLIBC_2.34, dlopen@GLIBC_2.34; 2.33 made stat
// and fstat real functions; 2.32 added __libc_single_threaded, which the statically linked
// libstdc++ reads; 2.36 added arc4random, which its std::random_device uses), and the static
// linker binds every reference to the newest version of the build host. A loader older than
// that version refuses the library ("version `GLIBC_2.34' not found"), even though the
// function itself has existed for decades.
//
// How: every reference to such a symbol, in our objects and in libstdc++.a's, binds at link time
// to a hidden definition below (a definition in the link wins over a shared library's, and the
// version script keeps it out of the dynamic symbol table). Each definition either forwards to
// the oldest version of the same function (`.symver` on a differently named reference, so the
// forwarder does not call itself), or is written here from older interfaces (syscalls,
// getrandom). The oldest versions live in libpthread.so.0 / libdl.so.2 before glibc 2.34 and
// in libc.so.6 (as compatibility symbols) since, which is why the plugin also has NEEDED entries
// for libpthread.so.0 and libdl.so.2 (nccl-plugin/CMakeLists.txt): the loader looks a
// versioned symbol up by name and version in every object in scope. plugin_so_check.sh fails
// the tests if anything newer than GLIBC_2.28 is referenced again (a new libc call elsewhere in
// the plugin may need an entry here).
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__)
#define TQ_GLIBC_BASE "GLIBC_2.2.5"
#define TQ_GLIBC_SETNAME "GLIBC_2.12"
#elif defined(__aarch64__)
#define TQ_GLIBC_BASE "GLIBC_2.17"
#define TQ_GLIBC_SETNAME "GLIBC_2.17"
#else
#error "glibc_compat.cc: give this architecture's oldest glibc symbol versions"
#endif

#define TQ_HIDDEN __attribute__((visibility("hidden")))

// `tq_old_NAME` is a reference to NAME@VERSION; NAME below is our hidden forwarder.
#define TQ_OLD(name, version) __asm__(".symver tq_old_" #name ", " #name "@" version)

extern "C" {

int tq_old_pthread_create(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
int tq_old_pthread_join(pthread_t, void**);
int tq_old_pthread_detach(pthread_t);
int tq_old_pthread_once(pthread_once_t*, void (*)());
int tq_old_pthread_mutex_trylock(pthread_mutex_t*);
int tq_old___pthread_key_create(pthread_key_t*, void (*)(void*));
int tq_old_pthread_setname_np(pthread_t, const char*);
void* tq_old_dlopen(const char*, int);
void* tq_old_dlsym(void*, const char*);
int tq_old_dlclose(void*);
char* tq_old_dlerror();
TQ_OLD(pthread_create, TQ_GLIBC_BASE);
TQ_OLD(pthread_join, TQ_GLIBC_BASE);
TQ_OLD(pthread_detach, TQ_GLIBC_BASE);
TQ_OLD(pthread_once, TQ_GLIBC_BASE);
TQ_OLD(pthread_mutex_trylock, TQ_GLIBC_BASE);
TQ_OLD(__pthread_key_create, TQ_GLIBC_BASE);
TQ_OLD(pthread_setname_np, TQ_GLIBC_SETNAME);
TQ_OLD(dlopen, TQ_GLIBC_BASE);
TQ_OLD(dlsym, TQ_GLIBC_BASE);
TQ_OLD(dlclose, TQ_GLIBC_BASE);
TQ_OLD(dlerror, TQ_GLIBC_BASE);

TQ_HIDDEN int pthread_create(pthread_t* t, const pthread_attr_t* a, void* (*fn)(void*), void* arg) {
  return tq_old_pthread_create(t, a, fn, arg);
}
TQ_HIDDEN int pthread_join(pthread_t t, void** ret) { return tq_old_pthread_join(t, ret); }
TQ_HIDDEN int pthread_detach(pthread_t t) noexcept { return tq_old_pthread_detach(t); }
TQ_HIDDEN int pthread_once(pthread_once_t* once, void (*fn)()) {
  return tq_old_pthread_once(once, fn);
}
TQ_HIDDEN int pthread_mutex_trylock(pthread_mutex_t* m) noexcept {
  return tq_old_pthread_mutex_trylock(m);
}
TQ_HIDDEN int __pthread_key_create(pthread_key_t* key, void (*dtor)(void*)) {
  return tq_old___pthread_key_create(key, dtor);
}
TQ_HIDDEN int pthread_setname_np(pthread_t t, const char* name) noexcept {
  return tq_old_pthread_setname_np(t, name);
}
TQ_HIDDEN void* dlopen(const char* file, int mode) noexcept { return tq_old_dlopen(file, mode); }
TQ_HIDDEN void* dlsym(void* handle, const char* name) noexcept {
  return tq_old_dlsym(handle, name);
}
TQ_HIDDEN int dlclose(void* handle) noexcept { return tq_old_dlclose(handle); }
TQ_HIDDEN char* dlerror() noexcept { return tq_old_dlerror(); }

// stat/fstat as the system calls they wrap (the kernel's struct stat is glibc's on x86-64 and
// aarch64); errno as glibc sets it.
TQ_HIDDEN int stat(const char* path, struct stat* st) noexcept {
  return static_cast<int>(::syscall(SYS_newfstatat, AT_FDCWD, path, st, 0));
}
TQ_HIDDEN int fstat(int fd, struct stat* st) noexcept {
  return static_cast<int>(::syscall(SYS_fstat, fd, st));
}
TQ_HIDDEN int fstat64(int fd, struct stat64* st) noexcept {
  return static_cast<int>(::syscall(SYS_fstat, fd, st));
}

// libstdc++ skips atomic reference counting while this is nonzero. Always 0: the plugin runs in
// NCCL's multi-threaded process, and "not single-threaded" is always a correct answer.
TQ_HIDDEN char __libc_single_threaded = 0;

// std::random_device's source. getrandom (GLIBC_2.25) blocks only until the kernel's pool is
// initialised, as arc4random does; it cannot fail otherwise but by EINTR.
TQ_HIDDEN uint32_t arc4random() noexcept {
  uint32_t v = 0;
  while (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    if (errno != EINTR) ::abort();  // no entropy source at all (kernel < 3.17): as glibc does
  }
  return v;
}

}  // extern "C"
